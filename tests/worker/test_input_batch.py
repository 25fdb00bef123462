"""InputBatch: slots are reused, condensing keeps rows intact, tokens and blocks append."""

from __future__ import annotations

import numpy as np
import pytest

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler_output import CachedRequestData, NewRequestData
from actorllm.worker.input_batch import InputBatch, InputBatchFullError


def _new(
    rid: str, prompt: list[int], outputs: list[int] = (), blocks: list[int] = (), **sp: float
) -> NewRequestData:  # type: ignore[assignment]
    return NewRequestData(
        req_id=rid,
        prompt_token_ids=prompt,
        output_token_ids=list(outputs),
        sampling_params=SamplingParams(**sp),  # type: ignore[arg-type]
        block_ids=(list(blocks),),
        num_computed_tokens=0,
    )


def test_add_append_and_cached_update() -> None:
    b = InputBatch(max_num_seqs=4, max_model_len=16, block_size=4)
    i = b.add_request(_new("a", [1, 2, 3], [4], blocks=[7], temperature=0.5, top_k=3))
    assert b.num_tokens[i] == 4 and b.num_prompt_tokens[i] == 3
    b.append_token(i, 9)
    assert b.output_token_ids(i).tolist() == [4, 9]
    b.update_cached(CachedRequestData(req_id="a", new_block_ids=([8],), num_computed_tokens=4))
    assert b.block_table[i, :2].tolist() == [7, 8] and b.num_computed_tokens[i] == 4
    assert (b.temperature[i], b.top_k[i]) == (np.float32(0.5), 3)


def test_condense_moves_last_rows_into_holes() -> None:
    b = InputBatch(max_num_seqs=5, max_model_len=16, block_size=4)
    for k, rid in enumerate("abcde"):
        b.add_request(_new(rid, [k] * (k + 1), blocks=[k + 1], top_p=0.5 + k / 10))
    b.remove_request("a")
    b.remove_request("c")
    b.condense()
    assert b.num_reqs == 3
    assert [b.req_ids[i] for i in range(3)] == ["e", "b", "d"]
    for rid in "bde":
        i = b.req_id_to_index[rid]
        k = "abcde".index(rid)
        assert b.token_ids[i, : k + 1].tolist() == [k] * (k + 1)
        assert b.num_tokens[i] == k + 1 and b.block_table[i, 0] == k + 1
        assert b.top_p[i] == np.float32(0.5 + k / 10)
        assert b.params[i] is not None and b.params[i].top_p == pytest.approx(0.5 + k / 10)  # type: ignore[union-attr]
    # Freed rows are reused and stale tails do not leak into them.
    i = b.add_request(_new("f", [42]))
    assert i == 3 and b.token_ids[i, :2].tolist() == [42, 0]


def test_limits() -> None:
    b = InputBatch(max_num_seqs=1, max_model_len=4, block_size=2)
    b.add_request(_new("a", [1, 2, 3]))
    with pytest.raises(InputBatchFullError, match="slots"):
        b.add_request(_new("b", [1]))
    b.append_token(0, 4)
    with pytest.raises(InputBatchFullError, match="max_model_len"):
        b.append_token(0, 5)
    assert b.remove_request("zzz") is None


def _three(max_model_len: int = 16) -> InputBatch:
    b = InputBatch(max_num_seqs=4, max_model_len=max_model_len, block_size=4)
    for k, rid in enumerate("abc"):
        b.add_request(_new(rid, [k + 1] * (k + 2), blocks=[k + 1]))
    return b


def _state(b: InputBatch) -> list[np.ndarray]:
    return [b.token_ids, b.num_tokens, b.num_pending, b.num_computed_tokens, b.block_table]


def test_a_steps_cached_updates_at_once_match_them_one_by_one() -> None:
    cached = [
        CachedRequestData(req_id="c", new_block_ids=([9, 10],), num_computed_tokens=4),
        CachedRequestData(req_id="a", new_block_ids=([],), num_computed_tokens=2),
        CachedRequestData(req_id="b", new_block_ids=([11],), num_computed_tokens=3),
    ]
    one, many = _three(), _three()
    for c in cached:
        one.update_cached(c)
    many.update_cached_many(cached)
    many.update_cached_many([])
    for x, y in zip(_state(one), _state(many), strict=True):
        assert np.array_equal(x, y)
    rows = {r: many.req_id_to_index[r] for r in "abc"}
    assert many.block_table[rows["c"], :3].tolist() == [3, 9, 10]
    assert many.block_table[rows["b"], :3].tolist() == [2, 11, 0]
    assert many.block_table[rows["a"], :3].tolist() == [1, 0, 0]
    assert [int(many.num_computed_tokens[rows[r]]) for r in "abc"] == [2, 3, 4]


def test_a_steps_tokens_resolved_at_once_match_them_one_by_one() -> None:
    one, many = _three(), _three()
    for b in (one, many):
        b.add_pending(np.arange(3), np.arange(3))
    slots = [one.req_id_to_index[r] for r in "cab"]
    gens = [int(one.generation[s]) for s in slots]
    gens[1] += 7  # "a" was re-added since it sampled: its token is dropped
    tokens = [30, 10, 20]
    done = [one.resolve_pending(s, g, t) for s, g, t in zip(slots, gens, tokens, strict=True)]
    assert done == [True, False, True]
    many.resolve_pending_many(slots, gens, tokens)
    many.resolve_pending_many([], [], [])
    for x, y in zip(_state(one), _state(many), strict=True):
        assert np.array_equal(x, y)
    assert many.output_token_ids(many.req_id_to_index["c"]).tolist() == [30]
    rows = {r: many.req_id_to_index[r] for r in "abc"}
    assert [many.output_token_ids(rows[r]).tolist() for r in "abc"] == [[], [20], [30]]
    assert [int(many.num_pending[rows[r]]) for r in "abc"] == [1, 0, 0]


def test_resolving_past_max_model_len_names_the_request() -> None:
    b = _three(max_model_len=4)  # "c" holds 4 prompt tokens already
    slots = [b.req_id_to_index[r] for r in "ac"]
    with pytest.raises(InputBatchFullError, match="request c reached max_model_len"):
        b.resolve_pending_many(slots, [int(b.generation[s]) for s in slots], [5, 6])
