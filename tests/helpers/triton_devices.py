"""Whether this machine can run the Triton kernels on a device: one rule for every test."""

from __future__ import annotations

import pytest
import torch


def require_triton_device(name: str) -> None:
    """Skip the calling test unless Triton can run on ``name`` ("cpu": the interpreter,
    "cuda": a GPU). Fails instead when triton was imported before ``TRITON_INTERPRET=1``
    on a machine without CUDA: that is a test-setup error, not a missing device."""
    if name == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from actorllm.kernels.triton import supports_device

    if not supports_device(name):
        if name == "cpu" and not torch.cuda.is_available():
            pytest.fail(
                "triton was imported before TRITON_INTERPRET=1 was set; set it in the "
                "environment (or in tests/conftest.py) so CPU kernel tests can run"
            )
        pytest.skip("CPU tensors need Triton's interpreter; this run compiles for CUDA")
