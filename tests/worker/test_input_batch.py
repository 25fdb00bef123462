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
