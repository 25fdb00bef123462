"""The suffix decoding proposer over a real InputBatch: drafts from the request's own
tokens and from past requests' outputs, variable lengths within the room, the global
cache bounded by max_cached_requests (FIFO), per-request records freed when requests
leave, outputs re-cached when they come back, and a core restart's reset."""

from __future__ import annotations

import pytest

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler_output import NewRequestData
from actorllm.worker.input_batch import InputBatch
from actorllm.worker.spec_decode.propose import propose_drafts
from actorllm.worker.spec_decode.suffix import SuffixProposer, SuffixSettings

LOOP = [5, 6, 7, 8, 9]


def _batch() -> InputBatch:
    return InputBatch(max_num_seqs=4, max_model_len=128, block_size=16)


def _add(batch: InputBatch, req_id: str, prompt: list[int], outputs: list[int] = (), **sp):
    params = SamplingParams(temperature=0.0, max_tokens=sp.pop("max_tokens", 64), **sp)
    return batch.add_request(NewRequestData(
        req_id=req_id, prompt_token_ids=prompt, output_token_ids=list(outputs),
        sampling_params=params, block_ids=([],), num_computed_tokens=0,
    ))  # fmt: skip


def _sample(batch: InputBatch, req_id: str, *tokens: int) -> int:
    slot = batch.req_id_to_index[req_id]
    for t in tokens:
        batch.append_token(slot, t)
    return slot


def _proposer(k: int = 8, **kw) -> SuffixProposer:
    return SuffixProposer(k, SuffixSettings(**kw))


def test_drafts_from_the_request_itself() -> None:
    batch, p = _batch(), _proposer(max_spec_factor=2.0)
    _add(batch, "a", [1, 2, *LOOP, *LOOP[:2]])
    slot = _sample(batch, "a", LOOP[2])
    # "5 6 7" matched (3 tokens, factor 2): up to 6 tokens, the loop's continuation
    drafts = propose_drafts(p, batch, [slot])
    assert drafts == {"a": [8, 9, 5, 6, 7]}  # the walk ends where the tokens do
    assert p.statistics().active_requests == 1


def test_the_room_caps_a_draft_and_records_anyway() -> None:
    batch, p = _batch(), _proposer(max_spec_factor=4.0)
    _add(batch, "a", [*LOOP, *LOOP, *LOOP[:2]], max_tokens=3)
    slot = _sample(batch, "a", LOOP[2])
    assert propose_drafts(p, batch, [slot]) == {"a": [8]}  # 3 - 1 output - 1 = 1 of room
    _sample(batch, "a", 8)
    assert propose_drafts(p, batch, [slot]) == {}  # no room: no drafts, tokens recorded
    assert p.statistics().global_tokens == 2


def test_drafts_from_past_requests_outputs() -> None:
    batch, p = _batch(), _proposer()
    _add(batch, "old", [1])
    slot = _sample(batch, "old", *LOOP, 3)
    propose_drafts(p, batch, [slot])
    batch.remove_request("old")
    p.forget("old")
    # a new request whose prompt has never seen the loop drafts it from "old"'s outputs
    _add(batch, "new", [40, 41, 5, 6])
    slot = _sample(batch, "new", 7)
    assert propose_drafts(p, batch, [slot]) == {"new": [8, 9, 3]}
    st = p.statistics()
    assert (st.active_requests, st.cached_requests) == (1, 2)


def test_no_global_cache_at_zero() -> None:
    batch, p = _batch(), _proposer(max_cached_requests=0)
    _add(batch, "old", [1])
    propose_drafts(p, batch, [_sample(batch, "old", *LOOP, 3)])
    _add(batch, "new", [40, 41, 5, 6])
    assert propose_drafts(p, batch, [_sample(batch, "new", 7)]) == {}
    assert p.statistics().cached_requests == 0 and p.statistics().global_tokens == 0


def test_global_cache_is_bounded_fifo() -> None:
    p = _proposer(max_cached_requests=2)
    for i in range(5):
        p.observe(f"r{i}", 0, [1, 2, 100 + 2 * i, 101 + 2 * i], num_prompt=2)
        p.forget(f"r{i}")
        assert p.statistics().cached_requests == min(i + 1, 2)
    assert list(p._cached) == ["r3", "r4"]  # the oldest starts went first
    assert p.statistics().global_tokens == 4  # two outputs each
    assert p._global.statistics().num_nodes == 1 + 2 * 3  # nothing of r0..r2 is left


def test_finished_and_aborted_requests_free_their_records() -> None:
    batch, p = _batch(), _proposer()
    for rid in ("a", "b", "c"):
        _add(batch, rid, [1, 2, 3, 1, 2])
    slots = [_sample(batch, rid, 3) for rid in ("a", "b", "c")]
    propose_drafts(p, batch, slots)
    assert p.statistics().active_requests == 3
    p.forget("a")  # the runner forgets finished and preempted ids (ModelRunner._update_states)
    assert p.statistics().active_requests == 2
    batch.remove_request("b")  # gone from the batch without a word: dropped at the next step
    propose_drafts(p, batch, [batch.req_id_to_index["c"]])
    assert set(p._active) == {"c"}


def test_resumed_request_is_rebuilt_from_its_tokens() -> None:
    """Preempted, then back in a new slot generation with its outputs: it drafts as before,
    and its outputs re-enter the global trie once."""
    batch, p = _batch(), _proposer()
    _add(batch, "a", [1, 2])
    slot = _sample(batch, "a", *LOOP, 5, 6)
    first = propose_drafts(p, batch, [slot])
    outputs = batch.output_token_ids(slot).tolist()
    batch.remove_request("a")
    p.forget("a")
    _add(batch, "a", [1, 2], outputs)
    slot = batch.req_id_to_index["a"]
    assert propose_drafts(p, batch, [slot]) == first
    st = p.statistics()
    assert (st.active_requests, st.cached_requests, st.global_tokens) == (1, 1, 7)


def test_reset_keeps_past_outputs_unless_an_update_broke() -> None:
    p = _proposer()
    p.observe("a", 0, [1, 2, 3, 4], num_prompt=2)
    p.reset()
    assert p.statistics().active_requests == 0 and p.statistics().cached_requests == 1
    p._updating = True  # as a crash inside observe() leaves it
    p.reset()
    assert p.statistics().cached_requests == 0 and p.statistics().global_tokens == 0


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        _proposer(max_tree_depth=0)
    with pytest.raises(ValueError):
        _proposer(min_token_prob=2.0)
