"""Where Triton kernels can run, and the checks every wrapper makes before a launch.

Triton compiles for CUDA. On a machine without a GPU the same kernels run in Triton's
interpreter, which executes each program instance with numpy on CPU tensors (about half a
millisecond per program: fine for tests at tiny shapes, useless for serving). Triton decides
between the two when *triton itself* is first imported, from the ``TRITON_INTERPRET``
environment variable, so that variable must be set before anything imports triton
(``tests/kernels/conftest.py`` does it when CUDA is absent). Importing this package always
works; launching a kernel on tensors it cannot run on raises :class:`TritonUnsupportedError`
instead of failing deep inside Triton.
"""

from __future__ import annotations

import torch
import triton

INTERPRET: bool = bool(triton.knobs.runtime.interpret)
"""True when triton was imported with ``TRITON_INTERPRET=1``: kernels run on CPU tensors."""


class TritonUnsupportedError(RuntimeError):
    """A Triton kernel was launched on tensors this process cannot run it on."""


def supports_device(device: torch.device | str) -> bool:
    """Whether the Triton kernels can run on tensors of ``device`` in this process.

    CUDA tensors run compiled (or interpreted, when ``TRITON_INTERPRET=1``); CPU tensors run
    only in interpreter mode.
    """
    kind = torch.device(device).type
    if kind == "cpu":
        return INTERPRET
    return kind == "cuda"


def check_device(*tensors: torch.Tensor) -> None:
    """Raise :class:`TritonUnsupportedError` unless all tensors share one runnable device."""
    device = tensors[0].device
    for t in tensors[1:]:
        if t.device != device:
            raise ValueError(f"tensors on different devices: {device} and {t.device}")
    if not supports_device(device):
        raise TritonUnsupportedError(
            f"Triton kernels cannot run on {device.type} tensors here: they need a CUDA device, "
            "or TRITON_INTERPRET=1 set before triton is first imported (CPU, tests only)"
        )


def next_pow2(n: int) -> int:
    """Smallest power of two >= max(n, 1): Triton tile sides must be powers of two."""
    return 1 << max(n - 1, 0).bit_length()
