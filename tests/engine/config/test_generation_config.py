"""Requests' default sampling parameters from generation_config.json, offline as vLLM's
``LLM``: one implementation (engine/config/generation_config.py) shared with the server."""

import json
import shutil
from pathlib import Path

import pytest

from actorllm import LLM, SamplingParams
from actorllm.engine.config.engine_config import EngineConfig, EngineConfigError
from actorllm.engine.config.generation_config import GenerationConfigError


@pytest.fixture(scope="module")
def model_with_defaults(tiny_model, tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("gen-config") / "model"
    shutil.copytree(tiny_model, path)
    (path / "generation_config.json").write_text(
        json.dumps(
            {
                "eos_token_id": 0,
                "temperature": 0.0,
                "top_k": 5,
                "top_p": 0.8,
                "max_new_tokens": 3,
                "repetition_penalty": 1.2,
            }
        )
    )
    return str(path)


def test_config_reads_overrides_and_refuses(model_with_defaults, tmp_path: Path) -> None:
    auto = EngineConfig(model=model_with_defaults, override_generation_config={"top_p": 0.5})
    assert auto.get_diff_sampling_param() == {
        "temperature": 0.0,
        "top_k": 5,
        "top_p": 0.5,
        "repetition_penalty": 1.2,
        "max_tokens": 3,
    }
    assert (
        EngineConfig(model=model_with_defaults, generation_config="vllm").get_diff_sampling_param()
        == {}
    )
    with pytest.raises(EngineConfigError, match="override_generation_config") as err:
        EngineConfig(override_generation_config={"do_sample": True})
    assert err.value.param == "override_generation_config"
    missing = EngineConfig(generation_config=str(tmp_path / "nowhere"))
    with pytest.raises(GenerationConfigError, match="generation_config"):
        missing.get_diff_sampling_param()


def test_llm_generate_without_params_uses_the_models_defaults(model_with_defaults) -> None:
    with LLM(
        model_with_defaults,
        max_model_len=128,
        kv_cache_memory_bytes=4 * 2**20,
        override_generation_config={"max_new_tokens": 2},
    ) as llm:
        defaults = llm.get_default_sampling_params()
        # (temperature 0 is greedy: SamplingParams then drops top_k/top_p, as vLLM)
        assert (defaults.temperature, defaults.repetition_penalty) == (0.0, 1.2)
        assert defaults.max_tokens == 2
        (out,) = llm.generate("hello there", use_tqdm=False)
        assert len(out.outputs[0].token_ids) == 2
        (chat,) = llm.chat([{"role": "user", "content": "hi"}], use_tqdm=False)
        assert len(chat.outputs[0].token_ids) <= 2
        # Given params win over the defaults entirely (as vLLM: no merging).
        (own,) = llm.generate("hello there", SamplingParams(max_tokens=4), use_tqdm=False)
        assert len(own.outputs[0].token_ids) == 4
