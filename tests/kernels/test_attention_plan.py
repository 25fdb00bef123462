"""The step's attention plan: the grouping of decode rows by context length partitions
them and costs no more than the simplest splits."""

from __future__ import annotations

import itertools

import pytest
import torch

from actorllm.kernels.attention_plan import group_decode_rows


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
