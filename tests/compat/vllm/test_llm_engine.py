"""``LLMEngine``: a user loop of add_request + step gives exactly LLM.generate's tokens."""

import itertools
import time

import pytest

from actorllm import LLM, LLMEngine, LoRARequest, RequestOutputKind, SamplingParams
from actorllm.core.errors import DuplicateRequestError, InvalidRequestError, RequestTooLongError
from actorllm.engine.config.engine_config import EngineConfig

GREEDY = SamplingParams(temperature=0.0, max_tokens=12)
# One sequence at a time: what waits is ordered by the scheduling policy.
CONFIG = dict(
    max_model_len=256,
    kv_cache_memory_bytes=8 * 2**20,
    max_num_seqs=1,
    scheduling_policy="priority",
)


@pytest.fixture(scope="module")
def engine(tiny_model):
    with LLMEngine(tiny_model, **CONFIG) as eng:
        yield eng


@pytest.fixture(scope="module")
def llm(tiny_model):
    with LLM(tiny_model, **CONFIG) as llm:
        yield llm


def run_to_end(engine: LLMEngine) -> tuple[dict[str, list], list[str]]:
    """Step until done: {request id: its outputs in order}, ids in order of finishing."""
    seen: dict[str, list] = {}
    finished: list[str] = []
    while engine.has_unfinished_requests():
        outs = engine.step()
        assert outs, "step() returned nothing while requests were unfinished"
        assert len({o.request_id for o in outs}) == len(outs)  # one output per request
        for out in outs:
            seen.setdefault(out.request_id, []).append(out)
            if out.finished:
                finished.append(out.request_id)
    return seen, finished


def test_a_step_loop_matches_generate_token_for_token(engine, llm):
    prompts = ["The quick brown fox", {"prompt_token_ids": [5, 6, 7, 8]}, {"prompt": "Hello"}]
    kinds = [RequestOutputKind.CUMULATIVE, RequestOutputKind.DELTA, RequestOutputKind.FINAL_ONLY]
    for i, (prompt, kind) in enumerate(zip(prompts, kinds, strict=True)):
        engine.add_request(f"r{i}", prompt, GREEDY.clone(output_kind=kind, n=2 if i else 1))
    assert engine.get_num_unfinished_requests() == 3
    seen, _ = run_to_end(engine)
    expected = llm.generate(
        prompts, [GREEDY.clone(n=2 if i else 1) for i in range(3)], use_tqdm=False
    )
    cumulative, delta, final = seen["r0"], seen["r1"], seen["r2"]
    # CUMULATIVE: each output extends the previous one; the last is the whole answer.
    tokens = [o.outputs[0].token_ids for o in cumulative]
    assert all(a == b[: len(a)] for a, b in itertools.pairwise(tokens))
    assert cumulative[-1].outputs[0].token_ids == expected[0].outputs[0].token_ids
    assert cumulative[-1].outputs[0].text == expected[0].outputs[0].text
    # DELTA: the pieces add up to the answer, per sample.
    for index in range(2):
        pieces = [c for o in delta for c in o.outputs if c.index == index]
        assert [t for c in pieces for t in c.token_ids] == expected[1].outputs[index].token_ids
        assert "".join(c.text for c in pieces) == expected[1].outputs[index].text
    # FINAL_ONLY: one output, at the end.
    assert len(final) == 1 and final[0].finished
    assert [c.token_ids for c in final[0].outputs] == [c.token_ids for c in expected[2].outputs]
    assert final[0].prompt == "Hello"
    assert engine.step() == [] and not engine.has_unfinished_requests()


def test_abort_mid_run_and_priorities(engine, llm):
    long = GREEDY.clone(max_tokens=40, ignore_eos=True)
    engine.add_request("running", "one request is running", long, priority=5)
    while not engine.step():  # "running" holds the only sequence slot
        pass
    engine.add_request("doomed", "this one is aborted while it waits", long, priority=1)
    engine.add_request("low", "a low priority request", GREEDY, priority=9)
    engine.add_request("high", "a high priority request", GREEDY, priority=0)
    engine.abort_request(["doomed", "no-such-request"])
    assert engine.get_num_unfinished_requests() == 3
    seen, finished = run_to_end(engine)
    assert "doomed" not in seen
    assert sorted(finished) == ["high", "low", "running"]
    assert finished.index("high") < finished.index("low")
    expected = llm.generate(
        ["one request is running", "a low priority request", "a high priority request"],
        [long, GREEDY, GREEDY],
        priority=[5, 9, 0],
        use_tqdm=False,
    )
    for name, want in zip(["running", "low", "high"], expected, strict=True):
        assert seen[name][-1].outputs[0].token_ids == want.outputs[0].token_ids


def test_fcfs_orders_by_arrival_time_and_refuses_priority(tiny_model):
    with LLMEngine(tiny_model, **{**CONFIG, "scheduling_policy": "fcfs"}) as engine:
        with pytest.raises(InvalidRequestError) as info:
            engine.add_request("urgent", "hi", GREEDY, priority=1)
        assert info.value.param == "priority"
        long = GREEDY.clone(max_tokens=40, ignore_eos=True)
        engine.add_request("running", "one request is running", long)
        while not engine.step():  # "running" holds the only sequence slot
            pass
        engine.add_request("b", "added first, arrived later", GREEDY)
        engine.add_request("a", "added last, arrived first", GREEDY, arrival_time=time.time() - 10)
        seen, finished = run_to_end(engine)
        assert finished == ["running", "a", "b"]
        metrics = seen["a"][-1].metrics
        assert metrics is not None and metrics.first_scheduled_time is not None
        assert metrics.first_scheduled_time - metrics.arrival_time >= 10.0


def test_abort_while_running_then_reuse_the_id(engine):
    engine.add_request("x", "abort me", GREEDY.clone(max_tokens=200, ignore_eos=True))
    outs = engine.step()
    assert outs and not outs[0].finished
    engine.abort_request("x")
    assert not engine.has_unfinished_requests()
    assert engine.step() == []
    engine.add_request("x", "abort me", GREEDY)  # the id is free again
    seen, _ = run_to_end(engine)
    assert seen["x"][-1].finished and len(seen["x"][-1].outputs[0].token_ids) == 12


def test_bad_requests_raise_at_add_request_and_queue_nothing(engine):
    engine.add_request("dup", "hi", GREEDY)
    with pytest.raises(DuplicateRequestError):
        engine.add_request("dup", "hi", GREEDY)
    with pytest.raises(RequestTooLongError):
        engine.add_request("long", "word " * 400, GREEDY)
    with pytest.raises(InvalidRequestError) as info:
        engine.add_request("bias", "hi", SamplingParams(logit_bias={10**6: 1.0}))
    assert info.value.param == "logit_bias"
    with pytest.raises(InvalidRequestError):
        engine.add_request("ints", [1, 2, 3], GREEDY)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError) as info:
        engine.add_request("mm", {"prompt": "x", "multi_modal_data": {}}, GREEDY)
    assert info.value.param == "prompt"
    with pytest.raises(TypeError):
        engine.add_request("params", "hi", {"max_tokens": 3})  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError) as info:
        engine.add_request("late", "hi", GREEDY, arrival_time="yesterday")  # type: ignore[arg-type]
    assert info.value.param == "arrival_time"
    assert engine.get_num_unfinished_requests() == 1
    seen, _ = run_to_end(engine)
    assert list(seen) == ["dup"]


def test_model_config_and_tokenizer(engine, tiny_model):
    config = engine.get_model_config()
    assert config.model == tiny_model
    assert config.max_model_len == 256
    assert config.get_vocab_size() == 4096 == config.hf_config.vocab_size
    assert engine.get_tokenizer().encode("hello") == engine.engine.tokenizer.encode("hello")


def test_from_engine_args(tiny_model):
    args = EngineConfig(model=tiny_model, max_model_len=128, kv_cache_memory_bytes=4 * 2**20)
    with LLMEngine.from_engine_args(args) as eng:
        assert eng.get_model_config().max_model_len == 128
        with pytest.raises(InvalidRequestError) as info:  # fcfs: priorities are refused
            eng.add_request("p", "hi", GREEDY, priority=3)
        assert info.value.param == "priority"
    with pytest.raises(TypeError):
        LLMEngine.from_engine_args({"model": tiny_model})  # type: ignore[arg-type]


def test_a_seeded_engine_loop_repeats_and_matches_generate(tiny_model):
    """Sampled requests without a seed get the same derived seed in LLMEngine (by their
    number among its requests) as in LLM: the same script repeats, and a step loop gives
    what generate gives."""
    sampled = SamplingParams(temperature=1.0, max_tokens=6, ignore_eos=True)
    prompts = ["The quick brown fox", "Hello"]

    def loop() -> list[list[int]]:
        with LLMEngine(tiny_model, **CONFIG) as engine:
            for i, prompt in enumerate(prompts):
                engine.add_request(str(i), prompt, sampled)
            done: dict[str, list[int]] = {}
            while engine.has_unfinished_requests():
                for out in engine.step():
                    if out.finished:
                        done[out.request_id] = out.outputs[0].token_ids
            return [done[str(i)] for i in range(len(prompts))]

    first = loop()
    assert loop() == first
    with LLM(tiny_model, **CONFIG) as llm:
        outs = llm.generate(prompts, sampled, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == first


def test_lora_request_and_methods_not_built(engine):
    # vLLM's add_request order: arrival_time, lora_request, tokenization_kwargs, ...
    engine.add_request("lora-none", "hi", GREEDY, None, None)
    while engine.has_unfinished_requests():
        engine.step()
    with pytest.raises(InvalidRequestError, match="lora_request must be a LoRARequest"):
        engine.add_request("lora-x", "hi", GREEDY, lora_request=object())
    adapter = LoRARequest("sql", 1, "/adapters/sql")
    with pytest.raises(InvalidRequestError, match="LoRA is not enabled"):
        engine.add_request("lora-y", "hi", GREEDY, lora_request=adapter)
    assert not engine.has_unfinished_requests()  # nothing was queued
    with pytest.raises(InvalidRequestError, match="LoRA is not enabled"):
        engine.add_lora(adapter)
    assert engine.list_loras() == set() and not engine.remove_lora(1)
    with pytest.raises(InvalidRequestError, match="LoRA 1 is not registered"):
        engine.pin_lora(1)


def test_add_request_truncates_keeps_the_cache_salt_and_asks_the_processors(tiny_model):
    config = {**CONFIG, "logits_processors": ["tests.helpers.logits_procs:BanToken"]}
    with LLMEngine(tiny_model, **config) as eng:
        # a prompt over the context that truncate_prompt_tokens cuts is served, as the engine
        # cuts it (the caller-side check used to refuse it)
        cut = SamplingParams(temperature=0.0, max_tokens=2, truncate_prompt_tokens=8)
        eng.add_request("cut", "word " * 400, cut)
        seen, _ = run_to_end(eng)
        assert len(seen["cut"][-1].prompt_token_ids) == 8
        # extra_args go to the configured processors' checks (no longer refused outright)
        xargs = SamplingParams(max_tokens=2, extra_args={"ban": 3})
        eng.add_request("xargs", "hi", xargs)
        seen, _ = run_to_end(eng)
        assert 3 not in seen["xargs"][-1].outputs[0].token_ids
        # the prompt's cache_salt reaches the engine: another salt shares no block
        text = "a prompt long enough to fill a few whole KV blocks " * 4
        for rid, salt in (("s1", "tenant-a"), ("s2", "tenant-b"), ("s3", "tenant-a")):
            before = eng.get_stats().prefix_cache_hits
            eng.add_request(rid, {"prompt": text, "cache_salt": salt}, GREEDY)
            run_to_end(eng)
            hits = eng.get_stats().prefix_cache_hits - before
            assert (hits > 0) == (rid == "s3"), (rid, hits)


def test_vllms_other_engine_methods(engine, caplog):
    assert engine.get_supported_tasks() == ("generate",)
    assert engine.tokenizer is engine.get_tokenizer()
    with caplog.at_level("INFO", logger="actorllm.engine"):
        engine.do_log_stats()
    assert "Running: 0 reqs, Waiting: 0 reqs" in caplog.text
    engine.add_request("gone", "hi", GREEDY)
    engine.abort_request(["gone"], internal=True)  # the ids it was added with, either way
    assert not engine.has_unfinished_requests()
    with pytest.raises(NotImplementedError, match=r"^LLMEngine\.start_profile\(max_iterations"):
        engine.start_profile(max_iterations=3)
