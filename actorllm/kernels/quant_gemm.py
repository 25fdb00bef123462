"""Weight-only quantized GEMM through the native kernels ``csrc/wq_gemm.c`` (few rows) and
``csrc/w4a8_gemm.c`` (any rows): the packed 4/8-bit weight is read inside the product, so
a decode step reads the packed bytes (a quarter of bf16's for 4-bit) and nothing else.

Returns None where the kernel does not take the call (no native build, not CPU, shapes it
does not handle); the caller then runs its torch path (``models/quant/packed.py``).

4-bit weights multiply int8-quantized inputs by default (W4A8, :func:`wq_linear_a8`), as
vLLM's CPU build does on the hosts it has an int8 kernel for; ``VLLM_CPU_INT4_W4A8=0`` (or
``ACTORLLM_CPU_INT4_W4A8=0``, which wins) keeps the inputs in float. GGUF's 8-bit blocks
(Q8_0, Q6_K, Q5_K, Q5_0, Q5_1) do the same through ``csrc/q8a8_gemm.c``, as llama.cpp and
vLLM's GGUF kernels multiply them (activations quantized to 8 bits a block);
``ACTORLLM_CPU_GGUF_A8=0`` keeps their inputs in float.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
from collections.abc import Mapping
from typing import Any

import torch

from actorllm.kernels import native

logger = logging.getLogger(__name__)

W4A8_ENV = ("ACTORLLM_CPU_INT4_W4A8", "VLLM_CPU_INT4_W4A8")  # the first one set wins
GGUF_A8_ENV = ("ACTORLLM_CPU_GGUF_A8",)

# Up to this many rows the GEMM is bound by reading the weight: the native kernel wins;
# above it the dequantize-a-tile-then-matmul path reuses each tile over the rows.
MAX_ROWS = 16

_P, _I64, _I32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
_ARGS: list[Any] = [_P, _I64, _I64, _P, _I64, _I32, _P, _P, _I64, _P, _P, _I32]


@functools.cache
def _lib() -> Any:
    return native.loaded("wq_gemm", {
        "wq_linear": (_ARGS, ctypes.c_int),
        "wq_dequant": ([_P, _I64, _I64, _I32, _P, _P, _I64, _P, _I32], None),
        "i8_gemm": ([_P, _I64, _I64, _P, _I64, _P, _I32], ctypes.c_int),
        "w8a8_linear": ([_P, _I64, _I64, _P, _I64, _P, _P, _I32], ctypes.c_int),
        "i8_gemm_vnni": ([], ctypes.c_int),
    })  # fmt: skip


# The int8-input kernels by the weight's bits: csrc/<name>.c, each exporting wq_linear_a8
# (wq_linear's arguments) and wq_linear_a8_built.
_A8_SOURCES = {4: "w4a8_gemm", 8: "q8a8_gemm"}
# Extra compiler flags for the int8-input kernels (tests build a path the host would not
# take, as tests/helpers/native_builds.py does for the others).
_BUILD_FLAGS: tuple[str, ...] = ()


@functools.cache
def _a8_lib(bits: int, flags: tuple[str, ...] = ()) -> Any:
    source = _A8_SOURCES.get(bits)
    if source is None:
        return None
    return native.loaded(source, {
        "wq_linear_a8": (_ARGS, ctypes.c_int), "wq_linear_a8_built": ([], ctypes.c_int),
    }, flags)  # fmt: skip


def _switch(names: tuple[str, ...], environ: Mapping[str, str]) -> bool:
    """An on/off variable (an integer, on unless 0; the first of ``names`` set wins)."""
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            try:
                return bool(int(value))
            except ValueError:
                raise ValueError(f"{name}: must be 0 or 1, got {value!r}") from None
    return True


def w4a8_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether 4-bit linears quantize their inputs to int8 (vLLM's ``VLLM_CPU_INT4_W4A8``:
    an integer, on unless 0).

    >>> w4a8_enabled({}), w4a8_enabled({"VLLM_CPU_INT4_W4A8": "0"})
    (True, False)
    >>> w4a8_enabled({"ACTORLLM_CPU_INT4_W4A8": "1", "VLLM_CPU_INT4_W4A8": "0"})
    True
    """
    return _switch(W4A8_ENV, environ)


def gguf_a8_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether GGUF's 8-bit blocks quantize their inputs to int8 (``ACTORLLM_CPU_GGUF_A8``,
    on unless 0).

    >>> gguf_a8_enabled({}), gguf_a8_enabled({"ACTORLLM_CPU_GGUF_A8": "0"})
    (True, False)
    """
    return _switch(GGUF_A8_ENV, environ)


def w4a8_inputs() -> bool:
    """Whether this process's 4-bit linears run W4A8 on the CPU: asked for
    (:func:`w4a8_enabled`) and built here (the native kernel on an AVX2 host). Asked for
    but not built is logged once; the first W4A8 product logs that it runs."""
    return _inputs(4, w4a8_enabled())


def gguf_a8_inputs() -> bool:
    """Whether this process's GGUF 8-bit blocks take int8 inputs on the CPU: asked for
    (:func:`gguf_a8_enabled`) and built here (AVX2); logged as :func:`w4a8_inputs`."""
    return _inputs(8, gguf_a8_enabled())


def _inputs(bits: int, enabled: bool) -> bool:
    lib = _a8_lib(bits)
    built = lib is not None and bool(lib.wq_linear_a8_built())
    if enabled and not built:
        _announce(bits, False)
    return enabled and built


_SWITCH_OFF = {4: "VLLM_CPU_INT4_W4A8=0", 8: "ACTORLLM_CPU_GGUF_A8=0"}
_WHAT = {4: "4-bit linears", 8: "GGUF's 8-bit blocks"}


def announce_a8(bits: int) -> None:
    """Log once per process that ``bits``-bit linears run with int8 inputs (called at the
    first such product, by whichever kernel ran it)."""
    _announce(bits, True)


@functools.cache
def _announce(bits: int, running: bool) -> None:
    if running:
        logger.info(
            "%s quantize their inputs to int8 per row and block (W%dA8); %s keeps them in "
            "float", _WHAT[bits], bits, _SWITCH_OFF[bits],
        )  # fmt: skip
    else:
        logger.info("%s keep their inputs in float: no W%dA8 kernel on this host",
                    _WHAT[bits], bits)  # fmt: skip


def _fn() -> Any:
    lib = _lib()
    return None if lib is None else lib.wq_linear


def i8_gemm(q: torch.Tensor, w: torch.Tensor) -> torch.Tensor | None:
    """q: int8 [M, I], w: int8 [O, I] (both contiguous, CPU) -> int32 [M, O] = q @ w.T,
    or None (no native build, or more than :data:`MAX_ROWS` rows)."""
    lib = _lib()
    if lib is None or q.shape[0] > MAX_ROWS or q.device.type != "cpu":
        return None
    q, w = q.contiguous(), w.contiguous()
    out = torch.empty(q.shape[0], w.shape[0], dtype=torch.int32)  # [M, O]
    lib.i8_gemm(q.data_ptr(), q.shape[0], q.shape[1], w.data_ptr(), w.shape[0],
                out.data_ptr(), torch.get_num_threads())  # fmt: skip
    return out


@functools.cache
def i8_gemm_vnni() -> bool:
    """Whether the native int8 product (:func:`i8_gemm`, :func:`w8a8_linear`) runs on
    AVX512-VNNI here (``csrc/wq_gemm.c``: detected by the compiler, never assumed)."""
    lib = _lib()
    return lib is not None and bool(lib.i8_gemm_vnni())


def w8a8_linear(x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor | None:
    """A W8A8 linear in one native call, any number of rows: x float [M, I], w int8 [O, I],
    w_scale float32 [O, 1] -> float32 [M, O] = (x_q @ w.T) * scale_row * scale_col, with
    ``int8_gemm.quantize_rows``'s rounding and epilogue bit for bit; None where there is no
    native build or x is not on the CPU."""
    lib = _lib()
    if lib is None or x.device.type != "cpu":
        return None
    x, w, w_scale = x.float().contiguous(), w.contiguous(), w_scale.contiguous()
    out = torch.empty(x.shape[0], w.shape[0], dtype=torch.float32)  # [M, O]
    rc = lib.w8a8_linear(x.data_ptr(), x.shape[0], x.shape[1], w.data_ptr(), w.shape[0],
                         w_scale.data_ptr(), out.data_ptr(), torch.get_num_threads())  # fmt: skip
    return out if rc == 0 else None


def wq_linear(
    x: torch.Tensor,
    packed: torch.Tensor,
    bits: int,
    scales: torch.Tensor,
    offsets: torch.Tensor | None,
    group_size: int,
    bias: torch.Tensor | None,
    act_int8: bool = False,
) -> torch.Tensor | None:
    """x: float32 [M, I] contiguous; packed uint8 [O, I * bits / 8]; scales, offsets
    float32 [O, G] (``w = q * scale + offset``; offsets None: symmetric codes,
    ``w = (q - 2 ** (bits - 1)) * scale``); bias float32 [O] or None -> float32
    [M, O], or None (not taken: above :data:`MAX_ROWS` rows the caller's tiled matmul
    reuses each weight tile over the rows). ``act_int8``: :func:`wq_linear_a8` where it
    takes the call, for any number of rows."""
    if act_int8:
        out = wq_linear_a8(x, packed, scales, offsets, group_size, bias, bits)
        if out is not None:
            _announce(bits, True)  # once per process, at the first product (CUDA: never)
            return out
    return _run(_fn(), x, packed, bits, scales, offsets, group_size, bias)


def wq_linear_a8(
    x: torch.Tensor,
    packed: torch.Tensor,
    scales: torch.Tensor,
    offsets: torch.Tensor | None,
    group_size: int,
    bias: torch.Tensor | None,
    bits: int = 4,
) -> torch.Tensor | None:
    """4- or 8-bit weights times int8-quantized inputs (``csrc/w4a8_gemm.c``,
    ``csrc/q8a8_gemm.c``): the inputs are quantized per row and block of columns (the
    group, at most 256; 32 for groups of 16), symmetric, then multiplied on integers.
    Arguments as :func:`wq_linear`; None where the kernel does not take the call (no AVX2
    build, other bits, a group neither 16 (8-bit) nor a multiple of 32).

    Any number of rows: prefill runs it too, so a token's numbers do not depend on whether
    it was decoded or recomputed in a prefill (a replay after a crash, a preemption), and
    on AVX2 its integer products cost less a row than float32 GEMMs do."""
    lib = _a8_lib(bits, _BUILD_FLAGS)
    fn = None if lib is None else lib.wq_linear_a8
    return _run(fn, x, packed, bits, scales, offsets, group_size, bias, max_rows=None)


def _ptr(t: torch.Tensor | None) -> int:
    """A tensor's address for a kernel, or 0 (NULL) for None."""
    return 0 if t is None else t.data_ptr()


def _run(
    fn: Any,
    x: torch.Tensor,
    packed: torch.Tensor,
    bits: int,
    scales: torch.Tensor,
    offsets: torch.Tensor | None,
    group_size: int,
    bias: torch.Tensor | None,
    max_rows: int | None = MAX_ROWS,
) -> torch.Tensor | None:
    """One of the kernels (``wq_linear``'s signature) on ``x``, or None (no kernel, more
    than ``max_rows`` rows, not a call it takes)."""
    if fn is None or x.device.type != "cpu" or x.dtype != torch.float32:
        return None
    if max_rows is not None and x.shape[0] > max_rows:
        return None
    m, i = x.shape
    o = packed.shape[0]
    out = torch.empty(m, o, dtype=torch.float32)  # [M, O]
    rc = fn(
        x.data_ptr(), m, i, packed.data_ptr(), o, bits, scales.data_ptr(), _ptr(offsets),
        group_size, _ptr(bias), out.data_ptr(),
        torch.get_num_threads(),
    )  # fmt: skip
    return out if rc == 0 else None


def wq_dequant(
    packed: torch.Tensor,
    bits: int,
    scales: torch.Tensor,
    offsets: torch.Tensor | None,
    group_size: int,
) -> torch.Tensor | None:
    """packed uint8 [T, I * bits / 8] (contiguous rows), scales / offsets float32 [T, G] ->
    the float32 weight [T, I] (``q * scale + offset``, or ``(q - 2 ** (bits - 1)) * scale``
    without offsets), or None (no native build, not CPU, groups of a size the layout
    cannot have)."""
    lib = _lib()
    if lib is None or packed.device.type != "cpu" or bits not in (4, 8):
        return None
    t = packed.shape[0]
    i = packed.shape[1] * 8 // bits
    if group_size <= 0 or i % group_size or (bits == 4 and group_size % 2):
        return None
    packed, scales = packed.contiguous(), scales.contiguous()
    offsets = None if offsets is None else offsets.contiguous()
    out = torch.empty(t, i, dtype=torch.float32)  # [T, I]
    lib.wq_dequant(packed.data_ptr(), t, i, bits, scales.data_ptr(), _ptr(offsets),
                   group_size, out.data_ptr(), torch.get_num_threads())  # fmt: skip
    return out
