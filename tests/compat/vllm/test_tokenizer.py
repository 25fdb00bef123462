"""vLLM's ``get_tokenizer``: the tokenizer the engine loads, at both import paths."""

import pytest

from actorllm.engine.actors.startup import load_tokenizer
from actorllm.engine.config.engine_config import EngineConfig
from actorllm.tokenizers import cached_get_tokenizer, get_tokenizer
from actorllm.transformers_utils.tokenizer import get_tokenizer as older_get_tokenizer


def test_get_tokenizer_is_what_the_engine_loads(tiny_model):
    ours = get_tokenizer(tiny_model)
    engines = load_tokenizer(EngineConfig(model=tiny_model))
    assert type(ours) is type(engines)
    assert ours.get_vocab() == engines.get_vocab()
    assert ours("a b c").input_ids == engines("a b c").input_ids
    assert older_get_tokenizer is get_tokenizer
    assert cached_get_tokenizer(tiny_model) is cached_get_tokenizer(tiny_model)


def test_keywords_reach_from_pretrained(tiny_model):
    assert get_tokenizer(tiny_model, truncation_side="left").truncation_side == "left"


@pytest.mark.parametrize("mode", ["mistral", "custom", "deepseek_v32"])
def test_other_tokenizer_modes_refuse_by_name(tiny_model, mode):
    with pytest.raises(NotImplementedError, match=f"tokenizer_mode='{mode}'"):
        get_tokenizer(tiny_model, tokenizer_mode=mode)
