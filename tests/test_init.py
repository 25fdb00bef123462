"""The names a vLLM script imports, where it imports them, without paying for torch."""

import os
import subprocess
import sys
from pathlib import Path

import actorllm
import actorllm.outputs
import actorllm.sampling_params
from actorllm.compat.vllm.llm import LLM
from actorllm.compat.vllm.llm_engine import LLMEngine
from actorllm.core import outputs as core_outputs
from actorllm.core import sampling_params as core_params
from actorllm.engine import AsyncEngine, EngineConfig

ROOT = Path(__file__).resolve().parents[1]


def test_top_level_names_are_the_engine_classes():
    from actorllm import LLM as TopLLM
    from actorllm import AsyncEngine as TopAsyncEngine
    from actorllm import CompletionOutput, RequestOutput, RequestOutputKind, SamplingParams
    from actorllm import EngineConfig as TopEngineConfig
    from actorllm import LLMEngine as TopLLMEngine

    assert (TopLLM, TopLLMEngine, TopAsyncEngine, TopEngineConfig) == (
        LLM,
        LLMEngine,
        AsyncEngine,
        EngineConfig,
    )
    assert SamplingParams is core_params.SamplingParams
    assert RequestOutputKind is core_params.RequestOutputKind
    assert (RequestOutput, CompletionOutput) == (
        core_outputs.RequestOutput,
        core_outputs.CompletionOutput,
    )
    assert set(actorllm.__all__) <= set(dir(actorllm))


def test_vllm_module_paths():
    assert actorllm.sampling_params.SamplingParams is core_params.SamplingParams
    assert actorllm.sampling_params.RequestOutputKind is core_params.RequestOutputKind
    assert actorllm.outputs.RequestOutput is core_outputs.RequestOutput
    params = actorllm.sampling_params.SamplingParams(
        structured_outputs=actorllm.sampling_params.StructuredOutputsParams(choice=["a", "b"])
    )
    assert params.structured_outputs is not None


def test_unknown_names_raise_attribute_error():
    try:
        actorllm.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("no AttributeError")


def test_import_actorllm_imports_no_torch():
    code = (
        "import sys, actorllm, actorllm.sampling_params, actorllm.outputs\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'trio') if m in sys.modules)\n"
        "print(heavy)\n"
        "actorllm.LLM\n"
        "print('torch' in sys.modules)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    # The engine's own imports stay torch-free too: torch loads with the model.
    assert out.stdout.split("\n")[:2] == ["[]", "False"]


def test_vllms_other_top_level_names():
    from actorllm import (
        ClassificationOutput,
        EmbeddingOutput,
        ModelRegistry,
        PoolingOutput,
        PromptType,
        ScoringOutput,
        __version__,
        __version_tuple__,
    )
    from actorllm.engine.api import pooling_outputs
    from actorllm.inputs import PromptType as InputsPromptType

    assert (PoolingOutput, EmbeddingOutput, ClassificationOutput, ScoringOutput) == (
        pooling_outputs.PoolingOutput,
        pooling_outputs.EmbeddingOutput,
        pooling_outputs.ClassificationOutput,
        pooling_outputs.ScoringOutput,
    )
    assert PromptType is InputsPromptType
    assert ".".join(map(str, __version_tuple__)) == __version__
    assert "LlamaForCausalLM" in ModelRegistry.get_supported_archs()


def test_initialize_ray_cluster_refuses_by_name():
    from actorllm import initialize_ray_cluster

    try:
        initialize_ray_cluster(None)
    except NotImplementedError as exc:
        assert "initialize_ray_cluster" in str(exc)
        assert "distributed_executor_backend" in str(exc)
    else:
        raise AssertionError("no NotImplementedError")


def test_vllm_outputs_names():
    from actorllm.core.logprob_types import PromptLogprobs, SampleLogprobs
    from actorllm.core.lora import LoRARequest
    from actorllm.core.outputs import WeightVersionSpan

    assert actorllm.outputs.PromptLogprobs is PromptLogprobs
    assert actorllm.outputs.SampleLogprobs is SampleLogprobs
    assert actorllm.outputs.LoRARequest is LoRARequest
    assert actorllm.outputs.WeightVersionSpan is WeightVersionSpan
    assert set(actorllm.outputs.__all__) <= set(dir(actorllm.outputs)) | set(
        actorllm.outputs._POOLING
    )


def test_vllm_entrypoints_llm_path():
    from actorllm.entrypoints.llm import LLM as EntrypointsLLM

    assert EntrypointsLLM is LLM
