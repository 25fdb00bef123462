"""The step's attention plan: the grouping of decode rows by context length partitions
them and costs no more than the simplest splits; with prompt lengths every row is planned
by its position alone."""

from __future__ import annotations

import itertools

import pytest
import torch

from actorllm.kernels.attention_plan import AttentionPlan, group_decode_rows


def _cost(groups: list[list[int]], lens: list[int], group_cost: int) -> int:
    return sum(group_cost + len(g) * max(lens[i] for i in g) for g in groups)


@pytest.mark.parametrize("seed", range(6))
def test_grouping_partitions_rows_and_is_no_worse_than_simple_splits(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 40, (1,), generator=g))
    lens = torch.randint(1, 600, (n,), generator=g).tolist()
    rows = list(range(n))
    groups = group_decode_rows(rows, lens, group_cost=256)
    assert sorted(i for grp in groups for i in grp) == rows
    for a, b in itertools.pairwise(groups):  # contiguous runs of the length order
        assert max(lens[i] for i in a) <= min(lens[i] for i in b)
    one = [sorted(rows, key=lens.__getitem__)]
    each = [[i] for i in rows]
    assert _cost(groups, lens, 256) <= min(_cost(one, lens, 256), _cost(each, lens, 256))


def test_grouping_extremes() -> None:
    lens = [10, 11, 12, 500, 510]
    assert group_decode_rows([], lens) == []
    # Free groups: every distinct length band alone; prohibitive groups: one group.
    assert len(group_decode_rows(list(range(5)), lens, group_cost=0)) == 2
    assert group_decode_rows(list(range(5)), lens, group_cost=10**9) == [[0, 1, 2, 3, 4]]
    # The default splits short from long rows: padding 3 short rows to 510 costs more.
    assert group_decode_rows(list(range(5)), lens) == [[0, 1, 2], [3, 4]]


def _rows(plan: AttentionPlan) -> tuple[list[tuple[int, int, bool]], list[int], list[int]]:
    """Each prefill piece (first row, rows, low), the decode rows' q rows and contexts."""
    pieces = [(p.start, p.end - p.start, p.low) for p in plan.prefills]
    decodes = plan.decodes
    if decodes is None:
        return pieces, [], []
    return pieces, decodes[0].tolist(), decodes[1].tolist()


def test_rows_are_planned_by_their_position_with_prompt_lengths() -> None:
    """Request 0 is replayed (30 prompt tokens and 5 outputs in one step), 1 decodes an
    output, 2 computes a 1-token last chunk of its prompt, 3 verifies 3 drafted outputs:
    outputs are decode rows, prompt rows prefill pieces split at ``low_from``."""
    q_lens, lens, prompts = [35, 1, 1, 3], [35, 50, 20, 40], [30, 10, 20, 37]
    qsl = torch.tensor([0, *itertools.accumulate(q_lens)], dtype=torch.int32)
    table = torch.arange(4 * 8, dtype=torch.int32).view(4, 8)
    plan = AttentionPlan.build(
        qsl, torch.tensor(lens, dtype=torch.int32), table, 8,
        short_as_decodes=True, prompt_lens=prompts, low_from=16,
    )  # fmt: skip
    pieces, rows, ctx = _rows(plan)
    assert pieces == [(0, 16, False), (16, 14, True), (36, 1, True)]
    assert [p.seq_len for p in plan.prefills] == [16, 30, 20]
    assert rows == [35, 30, 31, 32, 33, 34, 37, 38, 39]  # the decode, then the runs
    assert ctx == [50, 31, 32, 33, 34, 35, 38, 39, 40]
    # Without prompt lengths: by query count, the step's average deciding ``low`` for all.
    legacy = AttentionPlan.build(
        qsl, torch.tensor(lens, dtype=torch.int32), table, 8,
        short_as_decodes=True, low_from=16,
    )  # fmt: skip
    pieces, rows, _ = _rows(legacy)
    assert pieces == [(0, 35, True)] and rows == [35, 36, 37, 38, 39]
