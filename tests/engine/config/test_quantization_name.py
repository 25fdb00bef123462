"""ModelConfig.quantization names the checkpoint's method as vLLM's ModelConfig does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from actorllm.engine.config.engine_config import EngineConfig
from actorllm.engine.config.model_config import ModelConfig
from tests.helpers.models import make_tiny_checkpoint


@pytest.fixture(scope="module")
def base_config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    path = make_tiny_checkpoint(tmp_path_factory.mktemp("base"), "qwen3")
    return json.loads((path / "config.json").read_text())


def _checkpoint(path: Path, base: dict[str, object], qc: dict[str, object] | None) -> Path:
    """A config.json is all ModelConfig reads (no weights: nothing is loaded)."""
    path.mkdir()
    cfg = dict(base)
    if qc is not None:
        cfg["quantization_config"] = qc
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def _name(path: Path, device: str = "cpu") -> str | None:
    config = EngineConfig(model=str(path), device=device)  # type: ignore[arg-type]
    return ModelConfig.of(config, max_model_len=64, vocab_size=1).quantization


def test_quantization_is_vllms_name_after_its_override_pass(
    tmp_path: Path, base_config: dict[str, object]
) -> None:
    """vLLM 0.32: GPTQ reads auto_gptq, AWQ awq on CPU (auto_awq elsewhere), fp8 fp8,
    an unquantized checkpoint None."""
    gptq = _checkpoint(tmp_path / "gptq", base_config, {"quant_method": "gptq", "bits": 4})
    awq = _checkpoint(tmp_path / "awq", base_config, {"quant_method": "awq", "bits": 4})
    fp8 = _checkpoint(tmp_path / "fp8", base_config, {"quant_method": "fp8"})
    assert _name(gptq) == "auto_gptq"
    assert (_name(awq), _name(awq, "cuda")) == ("awq", "auto_awq")
    assert _name(fp8) == "fp8"
    assert _name(_checkpoint(tmp_path / "bare", base_config, None)) is None
