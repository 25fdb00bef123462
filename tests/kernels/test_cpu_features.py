"""CPU feature detection from /proc/cpuinfo flags, and the CPU default dtype it drives."""

from __future__ import annotations

import pytest
import torch

from actorllm.kernels import cpu_features
from actorllm.models.loader import resolve_dtype
from tests.helpers.models import make_tiny_checkpoint


def test_native_bf16_from_flags() -> None:
    assert cpu_features.native_bf16(frozenset({"avx512f", "avx512_bf16"}))
    assert cpu_features.native_bf16(frozenset({"amx_tile", "amx_bf16"}))
    assert not cpu_features.native_bf16(frozenset({"avx2", "avx512f", "avx512_vnni"}))
    assert not cpu_features.native_bf16(frozenset())


def test_cpu_flags_are_read() -> None:
    flags = cpu_features.cpu_flags()
    assert isinstance(flags, frozenset)
    if flags:  # Linux: a real flag list
        assert "fpu" in flags


@pytest.mark.parametrize("native", [True, False])
def test_auto_dtype_on_cpu_follows_native_bf16(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch, native: bool
) -> None:
    from pathlib import Path

    from actorllm.models.config import CheckpointConfig

    path = make_tiny_checkpoint(Path(str(tmp_path)) / "m", "llama")
    cfg = CheckpointConfig.from_pretrained(path)
    assert cfg.dtype == "float32"
    monkeypatch.setattr(cpu_features, "native_bf16", lambda flags=None: native)
    want = torch.bfloat16 if native else torch.float32
    assert resolve_dtype("auto", cfg, "cpu") == want
    assert resolve_dtype("auto", cfg) == torch.float32  # no device: the checkpoint's dtype
    assert resolve_dtype("float32", cfg, "cpu") == torch.float32  # a named dtype is kept
