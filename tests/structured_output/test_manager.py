"""The real tracker: compile off-thread, wake the owner, rebuild a matcher from tokens."""

from __future__ import annotations

import threading
import time

import numpy as np

from actorllm.core.request import Request
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.structured_outputs_params import StructuredOutputsParams as SOP
from actorllm.structured_output import GrammarCompiler, StructuredOutputManager
from actorllm.structured_output.backend import allowed_tokens, fill_bitmasks
from actorllm.structured_output.reasoning_gate import TokenMarkers
from tests.helpers.tokenizers import ENDOFTEXT_ID, VOCAB_SIZE, hf_demo_tokenizer


def _req(rid: str, outputs: list[int] = ()) -> Request:  # type: ignore[assignment]
    params = SamplingParams(structured_outputs=SOP(choice=["alpha", "beta"]))
    return Request(rid, [5, 6], params, output_token_ids=list(outputs))


def _ids(text: str) -> list[int]:
    return list(hf_demo_tokenizer().encode(text, add_special_tokens=False))


def test_compile_wakes_owner_and_matcher_tracks_tokens(compiler: GrammarCompiler) -> None:
    woken = threading.Event()
    m = StructuredOutputManager(compiler, on_ready=woken.set)
    r = _req(f"a-{compiler.default_backend}")
    m.add(r)
    if not m.poll(r):
        assert woken.wait(10)
        assert m.poll(r)
    mask = m.bitmask([r.request_id])
    assert mask.req_ids == [r.request_id]
    first = allowed_tokens(mask.array()[0], VOCAB_SIZE)
    assert _ids("alpha")[0] in first and _ids("beta")[0] in first
    assert m.accept(r.request_id, _ids("beta"))
    # Rebuilt from tokens: a new manager (a restarted scheduler) picks up where it was.
    m2 = StructuredOutputManager(compiler)
    r2 = _req(r.request_id, outputs=_ids("bet"))
    m2.add(r2)
    assert m2.poll(r2)  # a cache hit: ready at once
    nxt = allowed_tokens(m2.bitmask([r2.request_id]).array()[0], VOCAB_SIZE)
    assert _ids("a")[0] in nxt and _ids("l")[0] not in nxt
    m.remove(r.request_id)
    assert m.statistics() == {"compiling": 0, "matchers": 0}


def test_reasoning_is_unconstrained_until_it_closes(compiler: GrammarCompiler) -> None:
    start, end = _ids("<think>"), _ids("</think>")
    m = StructuredOutputManager(compiler, reasoning=TokenMarkers(start, end))
    params = SamplingParams(structured_outputs=SOP(choice=["alpha", "beta"]))
    r = Request(f"r-{compiler.default_backend}", [5, *start], params)
    m.add(r)
    compiler.submit(params.structured_outputs.key, None).result()  # type: ignore[union-attr]
    assert m.poll(r)
    assert len(allowed_tokens(m.bitmask([r.request_id]).array()[0], VOCAB_SIZE)) == VOCAB_SIZE
    assert m.accept(r.request_id, _ids("zzz ") + end[:1])  # reasoning: anything goes
    assert m.accept(r.request_id, end[1:] + _ids("al"))  # closes, then the answer starts
    nxt = allowed_tokens(m.bitmask([r.request_id]).array()[0], VOCAB_SIZE)
    assert _ids("pha")[0] in nxt and len(nxt) < 10
    # A prompt that closed the block (enable_thinking: false) is constrained at once.
    r2 = Request(f"r2-{compiler.default_backend}", [*start, 9, *end], params)
    m.add(r2)
    assert m.poll(r2)
    assert len(allowed_tokens(m.bitmask([r2.request_id]).array()[0], VOCAB_SIZE)) < 10


def test_a_single_token_opener_lets_the_model_choose_to_think(compiler: GrammarCompiler) -> None:
    opener, closer = _ids("@")[0], _ids("#")[0]
    m = StructuredOutputManager(compiler, reasoning=TokenMarkers([opener], [closer]))
    params = SamplingParams(structured_outputs=SOP(choice=["alpha", "beta"]))
    compiler.submit(params.structured_outputs.key, None).result()  # type: ignore[union-attr]
    prompt = _ids("Question:")  # ("#", the closer, is token 5)
    thinker = Request(f"t-{compiler.default_backend}", prompt, params)
    plain = Request(f"p-{compiler.default_backend}", prompt, params)
    for r in (thinker, plain):
        m.add(r)
        assert m.poll(r)
    rows = m.bitmask([thinker.request_id, plain.request_id]).array()
    first = allowed_tokens(rows[0], VOCAB_SIZE)
    assert opener in first and _ids("alpha")[0] in first and len(first) < 10
    assert m.accept(thinker.request_id, [opener, *_ids("free text"), closer])
    assert m.accept(plain.request_id, _ids("al"))  # no opener: constrained at once
    nxt = allowed_tokens(m.bitmask([thinker.request_id]).array()[0], VOCAB_SIZE)
    assert opener not in nxt and _ids("alpha")[0] in nxt


def test_a_row_after_an_inflight_token_waits_for_it(compiler: GrammarCompiler) -> None:
    """Async scheduling: the next step's row is asked for before the scheduler has fed the
    token in flight; the fill waits for it, then reflects it."""
    m = StructuredOutputManager(compiler)
    r = _req(f"w-{compiler.default_backend}")
    m.add(r)
    compiler.submit(r.sampling_params.structured_outputs.key, None).result()  # type: ignore[union-attr]
    assert m.poll(r)
    mask = m.bitmask([r.request_id], after=[1])  # one token in flight
    assert mask.waits_for_inflight
    assert not mask.bitmask.done()
    assert m.accept(r.request_id, _ids("b"))
    nxt = allowed_tokens(mask.array()[0], VOCAB_SIZE)
    assert _ids("eta")[0] in nxt and _ids("alpha")[0] not in nxt
    assert not m.bitmask([r.request_id], after=[1]).waits_for_inflight
    m.close()


def test_a_fill_waits_for_every_inflight_row(compiler: GrammarCompiler) -> None:
    """One wake-up per step: the fill sleeps until the last awaited row is fed (or its
    request removed), then fills every row from the fed state."""
    m = StructuredOutputManager(compiler)
    a, b, c = (_req(f"{x}-{compiler.default_backend}") for x in "fgh")
    for r in (a, b, c):
        m.add(r)
        compiler.submit(r.sampling_params.structured_outputs.key, None).result()  # type: ignore[union-attr]
        assert m.poll(r)
    ids = [a.request_id, b.request_id, c.request_id]
    mask = m.bitmask(ids, after=[1, 1, 1])
    assert m.accept(a.request_id, _ids("b"))
    assert m.accept(b.request_id, _ids("a"))
    time.sleep(0.05)
    assert not mask.bitmask.done()  # c's token is still in flight
    m.remove(c.request_id)  # finished meanwhile: no more waiting, its row unused
    rows = mask.array()
    assert _ids("eta")[0] in allowed_tokens(rows[0], VOCAB_SIZE)
    assert _ids("lpha")[0] in allowed_tokens(rows[1], VOCAB_SIZE)
    m.close()


def test_who_runs_a_fill(compiler: GrammarCompiler) -> None:
    """Rows in flight: the accept that feeds the last one fills them, on its own thread
    (the loop), before anyone asks. Rows fed: ``start`` (the worker, as the step arrives)
    hands the fill to the fill thread; never started, the caller of ``result`` fills."""
    m = StructuredOutputManager(compiler)
    r = _req(f"o-{compiler.default_backend}")
    m.add(r)
    compiler.submit(r.sampling_params.structured_outputs.key, None).result()  # type: ignore[union-attr]
    assert m.poll(r)
    rid = r.request_id
    inflight = m.bitmask([rid], after=[1])
    inflight.start()  # nothing to do yet: the loop runs it when the token comes
    assert m.accept(rid, _ids("b"))
    assert inflight.bitmask.done()  # filled inside accept
    assert _ids("eta")[0] in allowed_tokens(inflight.array()[0], VOCAB_SIZE)
    fed = m.bitmask([rid], after=[1])
    assert not fed.waits_for_inflight
    fed.start()
    for _ in range(200):  # the fill thread's
        if fed.bitmask.done():
            break
        time.sleep(0.005)
    assert fed.bitmask.done()
    never_started = m.bitmask([rid])
    assert not never_started.bitmask.done()
    assert np.array_equal(never_started.array(), fed.array())  # filled by this thread
    m.close()
    after_close = m.bitmask([rid])
    after_close.start()  # the pool is gone: result() fills it
    assert np.array_equal(after_close.array(), fed.array())


def test_the_batched_fill_equals_one_fill_per_row(compiler: GrammarCompiler) -> None:
    """``fill_bitmasks`` (xgrammar: one native call) writes what ``fill_bitmask`` per row
    writes, rows in any order and any subset of the bitmask."""
    m = StructuredOutputManager(compiler)
    reqs = [_req(f"b{i}-{compiler.default_backend}") for i in range(4)]
    for r, prefix in zip(reqs, ["", "b", "al", "beta"], strict=True):
        m.add(r)
        compiler.submit(r.sampling_params.structured_outputs.key, None).result()  # type: ignore[union-attr]
        assert m.poll(r)
        if prefix:
            assert m.accept(r.request_id, _ids(prefix))
    matchers = [m._matchers[r.request_id] for r in reqs]
    width = (VOCAB_SIZE + 31) // 32
    one = np.zeros((6, width), dtype=np.int32)
    rows = [4, 0, 5, 2]
    for matcher, row in zip(matchers, rows, strict=True):
        matcher.fill_bitmask(one, row)
    batched = np.zeros((6, width), dtype=np.int32)
    fill_bitmasks(matchers, batched, rows)
    assert np.array_equal(one, batched)
    m.close()


def test_remove_and_close_end_a_wait(compiler: GrammarCompiler) -> None:
    m = StructuredOutputManager(compiler)
    a, b = _req(f"x-{compiler.default_backend}"), _req(f"y-{compiler.default_backend}")
    for r in (a, b):
        m.add(r)
        compiler.submit(r.sampling_params.structured_outputs.key, None).result()  # type: ignore[union-attr]
        assert m.poll(r)
    first = m.bitmask([a.request_id], after=[3])
    m.remove(a.request_id)  # finished meanwhile: its row is never read
    assert first.array().shape[0] == 1
    second = m.bitmask([b.request_id], after=[1])
    m.close()  # the scheduler was replaced: that step's result is dropped
    assert second.array().shape[0] == 1


def test_a_terminated_grammar_allows_only_stop_tokens(compiler: GrammarCompiler) -> None:
    """ignore_eos: the grammar took its stop token and the request goes on; the next row
    allows only stop tokens (xgrammar itself refuses to fill a terminated matcher)."""
    m = StructuredOutputManager(compiler)
    r = _req(f"t-{compiler.default_backend}")
    m.add(r)
    compiler.submit(r.sampling_params.structured_outputs.key, None).result()  # type: ignore[union-attr]
    assert m.poll(r)
    assert m.accept(r.request_id, [*_ids("beta"), ENDOFTEXT_ID])
    assert m.is_terminated(r.request_id)
    row = m.bitmask([r.request_id]).array()[0]
    assert allowed_tokens(row, VOCAB_SIZE) == [ENDOFTEXT_ID]
    m.close()


def test_thinking_switched_off_in_the_prompt_cannot_be_reopened(
    compiler: GrammarCompiler,
) -> None:
    """Qwen3's enable_thinking false ends the prompt with a closed block: the answer starts
    at once and the single-token opener is not offered beside the grammar (vLLM: the
    reasoning ended in the prompt)."""
    opener, closer = _ids("@")[0], _ids("#")[0]
    m = StructuredOutputManager(compiler, reasoning=TokenMarkers([opener], [closer]))
    params = SamplingParams(structured_outputs=SOP(choice=["alpha", "beta"]))
    compiler.submit(params.structured_outputs.key, None).result()  # type: ignore[union-attr]
    off = Request(f"off-{compiler.default_backend}", [*_ids("Q"), opener, closer, 9], params)
    m.add(off)
    assert m.poll(off)
    first = allowed_tokens(m.bitmask([off.request_id]).array()[0], VOCAB_SIZE)
    assert opener not in first and _ids("alpha")[0] in first
    m.close()


def test_the_requests_reasoning_ended_decides_where_the_constraint_starts(
    compiler: GrammarCompiler,
) -> None:
    """The server resolves it from the request's chat_template_kwargs (qwen3's
    enable_thinking): True constrains from the first token, False waits for the end, even
    where the prompt alone says otherwise; None leaves it to the gate, which thinks as the
    parser does without kwargs (qwen3: on, so a plain prompt waits too)."""
    opener, closer = _ids("@")[0], _ids("#")[0]
    m = StructuredOutputManager(compiler, reasoning=TokenMarkers([opener], [closer], True))
    params = SamplingParams(structured_outputs=SOP(choice=["alpha", "beta"]))
    compiler.submit(params.structured_outputs.key, None).result()  # type: ignore[union-attr]
    prompt = _ids("Question:")
    free = {}
    for name, ended in (("on", False), ("off", True), ("unsaid", None)):
        r = Request(f"{name}-{compiler.default_backend}", prompt, params, reasoning_ended=ended)
        m.add(r)
        assert m.poll(r)
        row = allowed_tokens(m.bitmask([r.request_id]).array()[0], VOCAB_SIZE)
        free[name] = len(row) == VOCAB_SIZE
    assert free == {"on": True, "off": False, "unsaid": True}
    m.close()


def test_plain_text_markers_gate_the_answer_and_survive_a_rebuild(
    compiler: GrammarCompiler,
) -> None:
    """Granite: the prompt asks for thinking, so the output is free text until it writes
    'Here is my response:' (in whatever tokens); a restarted scheduler's new manager
    replays the outputs to the same place. Without the ask, the output is constrained."""
    from actorllm.reasoning import GraniteReasoningParser as G
    from actorllm.structured_output.reasoning_gate import TextMarkers

    gate = TextMarkers(hf_demo_tokenizer(), G.start_texts, G.end_texts)
    m = StructuredOutputManager(compiler, reasoning=gate)
    params = SamplingParams(structured_outputs=SOP(choice=["alpha", "beta"]))
    compiler.submit(params.structured_outputs.key, None).result()  # type: ignore[union-attr]
    prompt = _ids("Write your thoughts after 'Here is my thought process:'. Q: a or b?\n")
    r = Request(f"g-{compiler.default_backend}", prompt, params)
    m.add(r)
    assert m.poll(r)
    free = len(allowed_tokens(m.bitmask([r.request_id]).array()[0], VOCAB_SIZE))
    assert free == VOCAB_SIZE
    thought = _ids("Here is my thought process: Here is my answer: zzz.\nHere is my response:")
    assert m.accept(r.request_id, thought[:-1])  # still free text
    assert len(allowed_tokens(m.bitmask([r.request_id]).array()[0], VOCAB_SIZE)) == VOCAB_SIZE
    assert m.accept(r.request_id, [thought[-1], *_ids("al")])
    nxt = allowed_tokens(m.bitmask([r.request_id]).array()[0], VOCAB_SIZE)
    assert _ids("pha")[0] in nxt and len(nxt) < 10
    m2 = StructuredOutputManager(compiler, reasoning=gate)  # a restarted scheduler's
    r2 = Request(r.request_id, prompt, params, output_token_ids=[*thought, *_ids("al")])
    m2.add(r2)
    assert m2.poll(r2)
    assert allowed_tokens(m2.bitmask([r2.request_id]).array()[0], VOCAB_SIZE) == nxt
    off = Request(f"off-{compiler.default_backend}", _ids("Q: a or b?\n"), params)
    m.add(off)
    assert m.poll(off)
    assert len(allowed_tokens(m.bitmask([off.request_id]).array()[0], VOCAB_SIZE)) < 10
    m.close()
    m2.close()
