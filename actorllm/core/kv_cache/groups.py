"""KV cache groups: which layers share one block table (vLLM's hybrid KV cache idea).

A model whose layers all attend alike (full attention everywhere, or one sliding window
everywhere) has one group: every layer reads the same block table, and a block id names
the same token positions in every layer's cache.

A hybrid model (Gemma 2: sliding and full layers alternate; Gemma 3: five sliding layers per
full one) cannot share one table: a sliding layer is done with a block long before a full
layer is. So layers are grouped by attention type, each group has its own block table, and
all groups draw from one pool of blocks. To keep every block the same size, every group has
the same number of layers, ``group_size``: the layers of one type are cut into runs of
``group_size`` (the last run may be shorter; its missing layers' memory goes unused). The
worker then allocates ``group_size`` cache tensors per K and V, and the layer at position
``j`` of any group uses tensor ``j``: a block id handed to group ``g`` belongs to group
``g``'s layers only.

``group_size`` is the smallest type's layer count, except when the types are nearly even
(the largest at most 1.25 x the smallest), where one group per type wastes little padding
and keeps the number of tables down.

>>> [(g.window, g.layers) for g in group_layers([8, None, 8, None])]
[(None, (1, 3)), (8, (0, 2))]
>>> [(g.window, g.layers) for g in group_layers([8, 8, 8, None, 8, 8])]
[(None, (3,)), (8, (0,)), (8, (1,)), (8, (2,)), (8, (4,)), (8, (5,))]
>>> [(g.window, g.layers) for g in group_layers([None, None])]
[(None, (0, 1))]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class KVCacheGroup:
    """Layers that share one block table; ``window`` None means full attention."""

    window: int | None
    layers: tuple[int, ...]


def group_layers(layer_windows: Sequence[int | None]) -> tuple[KVCacheGroup, ...]:
    """Group layers by attention type (full attention first, then windows ascending), each
    group ``group_size`` layers at most (see the module doc)."""
    if not layer_windows:
        raise ValueError("a model needs at least one attention layer.")
    by_type: dict[int | None, list[int]] = {}
    for i, w in enumerate(layer_windows):
        by_type.setdefault(w, []).append(i)
    if len(by_type) == 1:
        ((window, layers),) = by_type.items()
        return (KVCacheGroup(window, tuple(layers)),)
    counts = [len(v) for v in by_type.values()]
    size = max(counts) if max(counts) <= 1.25 * min(counts) else min(counts)
    order = sorted(by_type, key=lambda w: (w is not None, w or 0))
    return tuple(
        KVCacheGroup(w, tuple(by_type[w][i : i + size]))
        for w in order
        for i in range(0, len(by_type[w]), size)
    )


def group_size(groups: Sequence[KVCacheGroup]) -> int:
    """Layers per group: the number of cache tensors (per K and V) the worker allocates."""
    return max(len(g.layers) for g in groups)


def layer_slots(groups: Sequence[KVCacheGroup], num_layers: int) -> list[tuple[int, int]]:
    """Per layer: ``(group, tensor)``, its group's index and the cache tensor it uses.

    >>> layer_slots(group_layers([8, None, 8, None]), 4)
    [(1, 0), (0, 0), (1, 1), (0, 1)]
    """
    out = [(-1, -1)] * num_layers
    for g, group in enumerate(groups):
        for j, layer in enumerate(group.layers):
            out[layer] = (g, j)
    return out
