"""KV cache groups: layers grouped by attention type, every group the same size."""

from __future__ import annotations

import pytest

from actorllm.core.kv_cache.groups import group_layers, group_size, layer_slots


def test_one_attention_type_is_one_group() -> None:
    assert [(g.window, g.layers) for g in group_layers([None] * 4)] == [(None, (0, 1, 2, 3))]
    assert [(g.window, g.layers) for g in group_layers([16] * 3)] == [(16, (0, 1, 2))]


def test_gemma3_27b_layout_cuts_sliding_layers_into_groups_of_the_full_count() -> None:
    """62 layers, one full in every 6: 10 full, 52 sliding -> groups of 10 (the last 2)."""
    windows = [None if (i + 1) % 6 == 0 else 1024 for i in range(62)]
    groups = group_layers(windows)
    assert group_size(groups) == 10
    assert [len(g.layers) for g in groups] == [10, 10, 10, 10, 10, 10, 2]
    assert groups[0].window is None and all(g.window == 1024 for g in groups[1:])
    slots = layer_slots(groups, 62)
    assert sorted(slots) == sorted(set(slots))  # no two layers share a (group, tensor)
    assert max(j for _, j in slots) == 9


def test_nearly_even_types_make_one_group_each() -> None:
    windows = [8, None, 8, None, 8]  # 3 sliding, 2 full: 3 <= 1.25 * 2 fails -> size 2
    assert group_size(group_layers(windows)) == 2
    windows = [8, None] * 4 + [8]  # 5 sliding, 4 full: 5 <= 5 -> one group per type
    groups = group_layers(windows)
    assert group_size(groups) == 5 and len(groups) == 2


def test_no_layers_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        group_layers([])
