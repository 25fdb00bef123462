"""Kernel tests: Triton kernels against their torch references.

Without CUDA, Triton must run in its interpreter, and that is decided when triton is first
imported, so ``TRITON_INTERPRET=1`` is set here, at conftest import, before any test module
imports triton. With CUDA the kernels compile and the "cpu" cases are skipped.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

from tests.helpers.triton_devices import require_triton_device

# (device, dtype) per case: fp32 in the CPU interpreter; half precisions on a GPU.
_CASES = [
    pytest.param(("cpu", torch.float32), id="cpu-fp32"),
    pytest.param(("cuda", torch.bfloat16), id="cuda-bf16", marks=pytest.mark.cuda),
    pytest.param(("cuda", torch.float16), id="cuda-fp16", marks=pytest.mark.cuda),
]
_ATOL = {torch.float32: 2e-5, torch.bfloat16: 3e-2, torch.float16: 5e-3}


@pytest.fixture(params=_CASES)
def dev_dtype(request: pytest.FixtureRequest) -> tuple[torch.device, torch.dtype]:
    """Where and in which dtype a case runs; skips what this machine cannot run."""
    name, dtype = request.param
    require_triton_device(name)
    return torch.device(name), dtype


def atol(dtype: torch.dtype) -> float:
    """Absolute tolerance for comparing a kernel with its fp32-accumulating reference."""
    return _ATOL[dtype]
