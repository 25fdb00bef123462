"""``collective_rpc`` and the profiler from synchronous code: ``LLM`` and ``LLMEngine`` wrap
``AsyncEngine``'s calls, blocking until they return."""

import json
import time

import pytest
from safetensors.torch import load_file

from actorllm import LLM, LLMEngine, SamplingParams
from actorllm.core.errors import InvalidRequestError
from actorllm.worker.profiler import ProfilerError

GREEDY = SamplingParams(temperature=0.0, max_tokens=8)
SMALL = dict(max_model_len=256, kv_cache_memory_bytes=8 * 2**20)
PROMPTS = ["The quick brown fox", "Once upon a time", "def main():"]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    return tmp_path_factory.mktemp("traces")


@pytest.fixture(scope="module")
def llm(tiny_model, traces):
    with LLM(tiny_model, profiler_dir=str(traces), **SMALL) as llm:
        yield llm


def greedy_tokens(llm_or_engine) -> list[list[int]]:
    if isinstance(llm_or_engine, LLM):
        outs = llm_or_engine.generate(PROMPTS, GREEDY, use_tqdm=False)
        return [o.outputs[0].token_ids for o in outs]
    for i, p in enumerate(PROMPTS):
        llm_or_engine.add_request(str(i), p, GREEDY)
    final = {}
    while llm_or_engine.has_unfinished_requests():
        for out in llm_or_engine.step():
            if out.finished:
                final[out.request_id] = out.outputs[0].token_ids
    return [final[str(i)] for i in range(len(PROMPTS))]


def test_by_name_and_by_callable(llm):
    (model,) = llm.collective_rpc("get_model")
    assert sum(p.numel() for p in model.parameters()) > 0
    assert llm.collective_rpc(lambda worker, x, y=0: x + y, args=(2,), kwargs={"y": 3}) == [5]


def test_a_raising_method_reaches_the_caller_and_the_engine_goes_on(llm):
    def boom(worker):
        raise RuntimeError("boom on the worker")

    with pytest.raises(RuntimeError, match="boom on the worker"):
        llm.collective_rpc(boom)
    with pytest.raises(InvalidRequestError):
        llm.collective_rpc("no_such_method")
    assert llm.generate("still fine", GREEDY, use_tqdm=False)[0].finished


def test_a_timeout_raises_and_the_engine_stays_healthy(llm):
    with pytest.raises(TimeoutError):
        llm.collective_rpc(lambda worker: time.sleep(1.0), timeout=0.05)
    assert llm.generate("still fine", GREEDY, use_tqdm=False)[0].finished


def test_load_weights_makes_greedy_outputs_those_of_the_new_weights(tiny_model, other_model):
    with LLM(other_model, **SMALL) as reference:
        want = greedy_tokens(reference)
    weights = load_file(f"{other_model}/model.safetensors")
    with LLMEngine(tiny_model, **SMALL) as engine:
        before = greedy_tokens(engine)
        (written,) = engine.collective_rpc("load_weights", kwargs={"weights": weights})
        assert "lm_head.weight" in written  # the model's own (fused) parameter names
        engine.reset_prefix_cache()  # cached KV was computed with the old weights
        after = greedy_tokens(engine)
    assert before != want
    assert after == want


def test_a_profile_trace_names_the_models_ops(llm, traces):
    with pytest.raises(ProfilerError):
        llm.stop_profile()  # never started
    llm.start_profile()
    llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    llm.stop_profile()
    (trace,) = traces.glob("*.trace.json")
    names = {e.get("name", "") for e in json.loads(trace.read_text())["traceEvents"]}
    assert {
        "aten::mm",
        "aten::addmm",
        "aten::linear",
        "mkldnn::_linear_pointwise",
        "actorllm::amx_linear",
        "actorllm::bf16_dot_linear",
    } & names
    assert any("embedding" in n for n in names)


def test_worker_extension_methods_and_wake_by_tags_through_llm(tiny_model):
    from tests.helpers import worker_extension

    with LLM(tiny_model, worker_extension_cls=worker_extension.PATH, **SMALL) as llm:
        assert llm.collective_rpc("describe", args=("t",)) == [
            {"tag": "t", "rank": 0, "device": "cpu", "has_model": True}
        ]
        reference = greedy_tokens(llm)
        llm.sleep(1)
        assert llm.wake_up(tags=["weights"]) is False and llm.is_sleeping()
        assert llm.collective_rpc("weight_sum")[0] != 0.0  # the weights are usable asleep
        assert llm.wake_up(tags=["kv_cache"]) is True and not llm.is_sleeping()
        assert greedy_tokens(llm) == reference
