"""thinking_token_budget in the sampler's per-row mask: a row whose budget is spent can
only write its end marker's next token (greedy and random alike); other rows are untouched."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler_output import NewRequestData
from actorllm.core.thinking_budget import ThinkingMarkers, forced_token
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


def _forced_rows(meta: Any, n: int) -> list[int | None]:
    """The token each row's mask forces (None: the row is not forced)."""
    adjust = meta.logit_adjust
    if adjust is None:
        return [None] * n
    out: list[int | None] = []
    for row in adjust:
        free = torch.nonzero(row == 0).flatten().tolist()
        out.append(free[0] if len(free) == 1 and bool(torch.isinf(row).sum() == V - 1) else None)
    return out


STEPS = st.lists(
    st.tuples(
        st.lists(st.integers(0, V - 1), min_size=1, max_size=3),  # the step's new tokens
        st.lists(st.integers(0, V - 1), max_size=2),  # drafts after them
        st.booleans(),  # preempted (and resumed in another slot) before the step
    ),
    max_size=10,
)


@settings(max_examples=80, deadline=None)
@given(prompt=st.lists(st.integers(0, V - 1), max_size=6), steps=STEPS, budget=st.integers(0, 4))
def test_masks_equal_the_full_scan_over_steps_drafts_and_preemption(
    prompt: list[int], steps: list[tuple[list[int], list[int], bool]], budget: int
) -> None:
    """The batch keeps each request's scan between steps; its forced rows are the full
    scan's of prompt + outputs (+ each row's drafts), whatever slot the request moved to."""
    params = _budget(budget)
    batch, _ = _batch([(SamplingParams(), [0], []), (params, list(prompt), [])])
    history = list(prompt)
    for new, drafts, preempt in steps:
        if preempt:
            batch.remove_request("r0" if len(history) % 2 else "r1")
            batch.condense()
            if "r0" not in batch.req_id_to_index:
                _add(batch, "r0", SamplingParams(), [0], [])
            if "r1" not in batch.req_id_to_index:
                _add(batch, "r1", params, prompt, history[len(prompt) :])
        slot = batch.req_id_to_index["r1"]
        for tok in new:
            batch.append_token(slot, tok)
        history += new
        batch.write_drafts(slot, drafts)
        rows = np.full(len(drafts) + 1, slot, dtype=np.int64)
        meta = build_sampling_metadata(batch, rows, V, CPU, offsets=np.arange(len(drafts) + 1))
        want = [forced_token([*history, *drafts[:i]], MARKERS, budget) for i in range(len(rows))]
        assert _forced_rows(meta, len(rows)) == want


def _add(batch: Any, rid: str, params: SamplingParams, prompt: list[int], out: list[int]) -> None:
    batch.add_request(
        NewRequestData(
            req_id=rid,
            prompt_token_ids=prompt,
            output_token_ids=out,
            sampling_params=params,
            block_ids=([],),
            num_computed_tokens=0,
            eos_token_id=None,
        )
    )
