"""What this CPU does natively, read from the OS (never assumed: machines differ).

``native_bf16()`` is true where bfloat16 matmuls run on hardware instructions: AVX512-BF16
(``avx512_bf16``, e.g. AMD Zen 4, Intel Cooper Lake) or AMX (``amx_bf16``, Intel Sapphire
Rapids and later). There oneDNN's bf16 GEMMs measured 2.2-2.5x faster than fp32 per core
(AMD EPYC, AVX512-BF16, shapes of a 75M model); without them bf16 is emulated and slower.
"""

from __future__ import annotations

import functools
import platform

BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@functools.cache
def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (``platform.processor()`` elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_flags() -> frozenset[str]:
    """The ``flags`` of /proc/cpuinfo (empty where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def native_bf16(flags: frozenset[str] | None = None) -> bool:
    flags = cpu_flags() if flags is None else flags
    return any(f in flags for f in BF16_FLAGS)


def amx_bf16(flags: frozenset[str] | None = None) -> bool:
    """AMX tiles multiply bf16 here (Intel Sapphire Rapids and later): oneDNN's brgemm, and
    torch's CPU flash attention through it, run bf16 products on them."""
    flags = cpu_flags() if flags is None else flags
    return "amx_bf16" in flags


# int8 dot products in hardware: AVX512-VNNI / AVX-VNNI (Cascade Lake, Zen 4, Alder Lake)
# and AMX-INT8 (Sapphire Rapids): oneDNN's int8 GEMMs run on them.
INT8_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")


def native_int8(flags: frozenset[str] | None = None) -> bool:
    flags = cpu_flags() if flags is None else flags
    return any(f in flags for f in INT8_FLAGS)


def amx_int8(flags: frozenset[str] | None = None) -> bool:
    """AMX tiles multiply int8 here (Intel Sapphire Rapids and later): W8A8 linears run on
    them (``kernels/amx_int8_linear.py``)."""
    flags = cpu_flags() if flags is None else flags
    return "amx_int8" in flags
