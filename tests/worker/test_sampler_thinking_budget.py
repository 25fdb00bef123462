"""thinking_token_budget in the sampler's per-row mask: a row whose budget is spent can
only write its end marker's next token (greedy and random alike); other rows are untouched."""

from __future__ import annotations

import numpy as np
import torch

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.thinking_budget import ThinkingMarkers
from actorllm.worker.sampler import Sampler
from actorllm.worker.sampling_metadata import build_sampling_metadata, needs_token_history
from tests.worker.test_sampler import CPU, V, _batch

START, END1, END2 = 5, 6, 7
MARKERS = ThinkingMarkers(start=(START,), end=(END1, END2))
LOGITS = torch.tensor([[0.0, 3.0, 2.5, 1.0, 0, 0, 0, 0]])  # greedy: token 1


def _budget(n: int, temperature: float = 0.0) -> SamplingParams:
    return SamplingParams(
        temperature=temperature, thinking_token_budget=n, thinking_markers=MARKERS
    )


def _sample(rows: list[tuple[SamplingParams, list[int], list[int]]]) -> list[int]:
    batch, slots = _batch(rows)
    meta = build_sampling_metadata(batch, slots, V, CPU)
    logits = LOGITS.expand(len(rows), -1).clone()
    return Sampler(V, CPU, seed=0)(logits, meta).sampled_token_ids.tolist()


def test_spent_budget_forces_the_end_marker_one_token_per_step() -> None:
    assert _sample([(_budget(2), [0, START], [1])]) == [1]  # one thinking token so far
    assert _sample([(_budget(2), [0, START], [1, 1])]) == [END1]
    assert _sample([(_budget(2), [0, START], [1, 1, END1])]) == [END2]
    assert _sample([(_budget(2), [0, START], [1, 1, END1, END2])]) == [1]  # the answer


def test_budget_zero_and_a_prompt_already_thinking() -> None:
    assert _sample([(_budget(0), [0, START], [])]) == [END1]
    assert _sample([(_budget(0), [0], [])]) == [1]  # not thinking: nothing to end


def test_random_sampling_writes_the_forced_token_too() -> None:
    rows = [(_budget(1, temperature=1.0), [START], [2])] * 40
    assert set(_sample(rows)) == {END1}


def test_mixed_batch_only_budgeted_rows_are_forced() -> None:
    free = SamplingParams(temperature=0.0)
    rows = [(_budget(1), [START], [2]), (free, [START], [2]), (_budget(5), [START], [2])]
    assert _sample(rows) == [END1, 1, 1]


def test_forcing_wins_over_allowed_token_ids_and_logit_bias() -> None:
    p = _budget(0).clone(allowed_token_ids=[1, 2], logit_bias={3: 50.0})
    assert _sample([(p, [START], [])]) == [END1]


def test_budget_rows_need_the_token_history_on_the_host() -> None:
    batch, slots = _batch([(_budget(3), [START], []), (SamplingParams(), [0], [])])
    assert needs_token_history(batch, slots[:1])
    assert not needs_token_history(batch, slots[1:])


def test_speculative_rows_read_their_drafts_as_outputs() -> None:
    # Budget 2, one thinking token known, drafts [1, END1] written after it: the rows
    # verify positions with 0, 1 and 2 drafts before them.
    batch, _ = _batch([(_budget(2), [0, START], [1])])
    known = int(batch.num_tokens[0])
    batch.token_ids[0, known : known + 2] = [1, END1]
    rows = np.zeros(3, dtype=np.int64)
    meta = build_sampling_metadata(batch, rows, V, CPU, offsets=np.arange(3))
    out = Sampler(V, CPU, seed=0)(LOGITS.expand(3, -1).clone(), meta).sampled_token_ids
    assert out.tolist() == [1, END1, END2]
