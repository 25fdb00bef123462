"""vLLM's config objects (``from actorllm.config import ...``) mean what their dicts mean."""

import dataclasses
import warnings

import pytest

from actorllm import LLM, AsyncEngineArgs, EngineArgs, SamplingParams
from actorllm.compat.vllm.args import engine_config
from actorllm.config import (
    CompilationConfig,
    CompilationMode,
    KVEventsConfig,
    KVTransferConfig,
    PoolerConfig,
    ProfilerConfig,
    ReasoningConfig,
    SpeculativeConfig,
    StructuredOutputsConfig,
    WeightTransferConfig,
)
from actorllm.engine.config.engine_config import EngineConfigError

# {keyword: (its config object, the dict vLLM accepts in its place)}
SAME = {
    "speculative_config": (
        SpeculativeConfig(method="ngram", num_speculative_tokens=3),
        {"method": "ngram", "num_speculative_tokens": 3},
    ),
    "kv_transfer_config": (
        KVTransferConfig(
            kv_connector="OffloadingConnector",
            kv_role="kv_both",
            kv_connector_extra_config={"host_bytes": "1GiB"},
        ),
        {
            "kv_connector": "OffloadingConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"host_bytes": "1GiB"},
        },
    ),
    "structured_outputs_config": (
        StructuredOutputsConfig(backend="guidance", disable_any_whitespace=True),
        {"backend": "guidance", "disable_any_whitespace": True},
    ),
    "pooler_config": (PoolerConfig(normalize=False), {"normalize": False}),
    "reasoning_config": (
        ReasoningConfig(reasoning_start_str="<t>", reasoning_end_str="</t>"),
        {"reasoning_start_str": "<t>", "reasoning_end_str": "</t>"},
    ),
    "weight_transfer_config": (WeightTransferConfig(backend="gloo"), {"backend": "gloo"}),
    "profiler_config": (
        ProfilerConfig(profiler="torch", torch_profiler_dir="/tmp/traces"),
        {"profiler": "torch", "torch_profiler_dir": "/tmp/traces"},
    ),
}

# {keyword: (an object asking for what is not built, the same as a dict)}
REFUSED = {
    "speculative_config": (SpeculativeConfig(method="medusa"), {"method": "medusa"}),
    "kv_transfer_config": (
        KVTransferConfig(kv_connector="NixlConnector", kv_role="kv_both"),
        {"kv_connector": "NixlConnector", "kv_role": "kv_both"},
    ),
    "structured_outputs_config": (
        StructuredOutputsConfig(backend="outlines"),
        {"backend": "outlines"},
    ),
    "kv_events_config": (
        KVEventsConfig(enable_kv_cache_events=True),
        {"enable_kv_cache_events": True},
    ),
    "profiler_config": (ProfilerConfig(profiler="nsys"), {"profiler": "nsys"}),
    "reasoning_config": (ReasoningConfig(think_str="<t>"), {"think_str": "<t>"}),
}


@pytest.mark.parametrize("name", sorted(SAME))
def test_a_config_object_gives_the_engine_config_of_its_dict(name):
    obj, raw = SAME[name]
    assert engine_config(None, **{name: obj}) == engine_config(None, **{name: raw})
    for cls in (EngineArgs, AsyncEngineArgs):
        made = cls(**{name: obj}).create_engine_config()
        assert made == cls(**{name: raw}).create_engine_config()


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_an_unsupported_field_is_refused_by_name_as_in_the_dict(name):
    obj, raw = REFUSED[name]
    errors = []
    for value in (obj, raw):
        with pytest.raises(EngineConfigError) as info:
            EngineArgs(**{name: value}).create_engine_config()
        errors.append(info.value)
    assert all(name in str(e) for e in errors)
    assert errors[0].param == errors[1].param  # the same field (or key) named


def test_compilation_config_warns_as_its_dict_does():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine_config(None, compilation_config=CompilationConfig(mode=CompilationMode.NONE))
        engine_config(None, compilation_config=CompilationConfig())  # vLLM's default: quiet
        engine_config(None, compilation_config={})
    assert len(caught) == 1
    assert "compilation_config" in str(caught[0].message)
    assert "no torch.compile" in str(caught[0].message)


def test_fields_are_attributes_and_engine_args_keep_the_object():
    spec = SpeculativeConfig(method="ngram")
    spec.num_speculative_tokens = 2  # set later, as on vLLM's dataclass
    assert spec == {"method": "ngram", "num_speculative_tokens": 2}
    assert repr(spec) == "SpeculativeConfig(method='ngram', num_speculative_tokens=2)"
    with pytest.raises(AttributeError, match="prompt_lookup_max"):
        spec.prompt_lookup_max  # noqa: B018
    args = EngineArgs(speculative_config=spec)
    assert args.speculative_config is spec
    assert dataclasses.asdict(args)["speculative_config"] == dict(spec)


def test_llm_runs_with_a_config_object(tiny_model):
    spec = SpeculativeConfig(method="ngram", num_speculative_tokens=2)
    with LLM(
        tiny_model, max_model_len=256, kv_cache_memory_bytes=8 * 2**20, speculative_config=spec
    ) as llm:
        assert llm.engine.config.speculative().num_speculative_tokens == 2
        params = SamplingParams(temperature=0.0, max_tokens=4)
        out = llm.generate("a b a b a b", params, use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 4
