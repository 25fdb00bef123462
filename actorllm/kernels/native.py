"""Native CPU kernels: C sources in ``kernels/csrc/``, built on first use with the host's C
compiler for the host's ISA (``-march=native``: detected, never assumed) and loaded with
ctypes. Calls release the GIL (ctypes does), so the event loop runs while a kernel does.

Built once per (source, compiler, CPU) into ``$ACTORLLM_CACHE_DIR/native`` (default
``~/.cache/actorllm/native``); concurrent builders race harmlessly (each writes a private
file and renames it into place). Where no compiler is found or the build fails, every caller
falls back to its torch path, with one log line saying why. ``ACTORLLM_NATIVE_KERNELS=0``
turns them off.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from actorllm.kernels.cpu_features import cpu_flags

logger = logging.getLogger(__name__)

# -fno-trapping-math: the kernels never read the floating-point exception flags, and without
# it GCC will not turn a float select (exp_f32's clamps, a NaN check) into a blend, so the
# portable loops that serve a host without AVX-512 stayed scalar ("control flow in loop"):
# on a 2-core Zen 3 (AVX2) silu_and_mul over [128, 2 x 2048] float32 took 1.02 ms, 0.14 with
# it. It allows no reassociation: every value is the same.
_FLAGS = [
    "-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=c11", "-fno-math-errno",
    "-fno-trapping-math",
]  # fmt: skip


def enabled() -> bool:
    return os.environ.get("ACTORLLM_NATIVE_KERNELS", "1") not in ("0", "false", "no")


def cache_dir() -> Path:
    root = os.environ.get("ACTORLLM_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "actorllm"
    )
    return Path(root) / "native"


@functools.cache
def library(name: str, extra_flags: tuple[str, ...] = ()) -> ctypes.CDLL | None:
    """``csrc/<name>.c`` built and loaded, or None (disabled, no compiler, failed build).

    ``extra_flags`` go after the usual ones (tests build a kernel's portable path with
    ``("-mno-avx512f",)``); each set is its own cached build."""
    if not enabled():
        return None
    if platform.system() != "Linux":
        logger.info("native kernels: built on Linux only; using the torch path")
        return None
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        logger.info("native kernels: no C compiler found; using the torch path")
        return None
    csrc = resources.files("actorllm.kernels").joinpath("csrc")
    source = csrc.joinpath(f"{name}.c").read_bytes()
    headers = _headers()
    key = hashlib.sha256()
    flags = [*_FLAGS, *extra_flags]
    for part in (source, compiler.encode(), " ".join(flags).encode(), _cpu_key().encode()):
        key.update(part)
    for header, text in headers.items():  # a changed shared header rebuilds every kernel
        key.update(header.encode())
        key.update(text)
    out = cache_dir() / f"{name}-{key.hexdigest()[:16]}.so"
    if not out.exists() and not _build(compiler, flags, source, headers, out):
        return None
    try:
        return ctypes.CDLL(str(out))
    except OSError as exc:
        logger.warning("native kernels: could not load %s (%s); using the torch path", out, exc)
        return None


def _cpu_key() -> str:
    """What -march=native depends on: the machine and its ISA flags."""
    return platform.machine() + " " + " ".join(sorted(cpu_flags()))


@functools.cache
def _headers() -> dict[str, bytes]:
    """``csrc/*.h`` by name: shared by the kernels (``#include "x.h"``), so each build
    gets them beside its source."""
    csrc = resources.files("actorllm.kernels").joinpath("csrc")
    return {
        f.name: f.read_bytes() for f in sorted(csrc.iterdir(), key=lambda f: f.name)
        if f.name.endswith(".h")
    }  # fmt: skip


def _build(
    compiler: str, flags: list[str], source: bytes, headers: dict[str, bytes], out: Path
) -> bool:
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        src = Path(tmp) / "kernel.c"
        src.write_bytes(source)
        for header, text in headers.items():
            (Path(tmp) / header).write_bytes(text)
        lib = Path(tmp) / "kernel.so"
        try:
            subprocess.run(
                [compiler, *flags, str(src), "-o", str(lib), "-lm"],
                check=True,
                capture_output=True,
                timeout=120,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            detail = getattr(exc, "stderr", b"") or b""
            logger.warning(
                "native kernels: building %s failed (%s %s); using the torch path",
                out.name,
                exc,
                detail.decode(errors="replace")[-500:],
            )
            return False
        os.replace(lib, out)  # atomic: a concurrent builder's copy is identical
    return True


def loaded(
    name: str, signatures: dict[str, tuple[list[Any], Any]], flags: tuple[str, ...] = ()
) -> Any:
    """``csrc/<name>.c`` built (with ``flags`` after the usual ones) and loaded with its
    functions' ctypes signatures (name -> (argtypes, restype)), or None (no native build)."""
    lib = library(name, flags)
    if lib is None:
        return None
    for fn, (args, res) in signatures.items():
        getattr(lib, fn).argtypes, getattr(lib, fn).restype = args, res
    return lib


def tile_library(name: str, init: str, signatures: dict[str, tuple[list[Any], Any]]) -> Any:
    """An AMX kernel (:func:`loaded`) whose ``init()`` asks Linux for the tile state once per
    process; None where it did not build, was built without AMX (``init`` returns 0) or the
    OS refused the tile state."""
    lib = loaded(name, {init: ([], ctypes.c_int), **signatures})
    if lib is None or not getattr(lib, init)():
        return None
    return lib
