"""BatchProcessors: the batch's changes reach processors in vLLM's order, rows are laid
out by batch index when only some requests sample, output ids stay live."""

import numpy as np
import torch

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler_output import NewRequestData
from actorllm.worker.input_batch import InputBatch
from actorllm.worker.logitsprocs.state import BatchProcessors
from tests.helpers.logits_procs import BanToken


def _new(rid: str, ban: int | None, prompt=(1, 2, 3)) -> NewRequestData:
    return NewRequestData(
        req_id=rid,
        prompt_token_ids=list(prompt),
        sampling_params=SamplingParams(extra_args=None if ban is None else {"ban": ban}),
        output_token_ids=[],
        block_ids=([],),
        num_computed_tokens=0,
        eos_token_id=None,
    )


def _setup():
    proc = BanToken(None, torch.device("cpu"), False)
    procs = BatchProcessors([proc])
    batch = InputBatch(8, 64, 16)
    batch.logitsprocs = procs
    return proc, procs, batch


def test_changes_in_order_and_rows_by_batch_index():
    proc, procs, batch = _setup()
    for rid, ban in [("a", 4), ("b", None), ("c", 6), ("d", 7)]:
        batch.add_request(_new(rid, ban))
    procs.flush(batch)
    assert proc.banned == {0: 4, 2: 6, 3: 7}
    batch.remove_request("a")
    batch.add_request(_new("e", 5))  # takes slot 0
    batch.remove_request("b")  # a hole at 1: d moves in
    batch.condense()
    procs.flush(batch)
    assert proc.banned == {0: 5, 2: 6, 1: 7}
    # Only slots 2 and 0 sample this step, in that order: each row keeps its own ban.
    logits = torch.zeros(2, 10)
    out = procs.apply(logits, np.array([2, 0]), all_greedy=True)
    assert out.shape == (2, 10)
    assert torch.isinf(out[0, 6]) and torch.isinf(out[1, 5])
    assert int(torch.isinf(out).sum()) == 2


def test_added_then_removed_in_one_step_never_reaches_processors():
    proc, procs, batch = _setup()
    batch.add_request(_new("a", 4))
    batch.remove_request("a")
    procs.flush(batch)
    assert proc.banned == {}


def test_output_ids_are_live():
    _, procs, batch = _setup()
    batch.add_request(_new("a", None))
    procs.flush(batch)
    (live,) = procs._outputs.values()
    batch.append_token(0, 42)
    batch.append_token(0, 43)
    procs.flush(batch)
    assert live == [42, 43]
