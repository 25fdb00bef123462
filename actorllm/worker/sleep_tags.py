"""What a sleeping worker can wake separately: vLLM's ``wake_up(tags=...)`` tags.

``sleep(level)`` puts both to sleep: the KV cache (freed; its contents are lost) and the
weights (level 1: kept in host memory, which on CPU is where they are anyway; level 2:
dropped, reloaded from the checkpoint). ``wake_up(tags)`` restores those named, so an RL
trainer sharing the device can bring the weights back, update them, and only then allocate
the KV cache (``["weights"]``, then ``["kv_cache"]``). Steps run again only once both are
back. The KV cache can also sleep alone, the weights staying where they are (vLLM's
``release_kv_cache_memory``: ``sleep_parts(["kv_cache"])``).

    >>> sorted(to_wake(frozenset(SLEEP_TAGS), None))
    ['kv_cache', 'weights']
    >>> sorted(to_wake(frozenset(SLEEP_TAGS), ["weights"]))
    ['weights']
"""

from __future__ import annotations

from collections.abc import Iterable

WEIGHTS = "weights"
KV_CACHE = "kv_cache"
SLEEP_TAGS = (WEIGHTS, KV_CACHE)


def check_tags(tags: Iterable[str] | None) -> list[str] | None:
    """``tags`` as a list (None: every tag); raises ``ValueError`` naming an unknown one."""
    if tags is None:
        return None
    if isinstance(tags, str):
        raise ValueError(f"tags must be a list of tags, not the string {tags!r}.")
    tags = list(tags)
    unknown = [t for t in tags if t not in SLEEP_TAGS]
    if unknown:
        raise ValueError(
            f"unknown wake_up tag(s) {', '.join(map(repr, unknown))}; the tags are "
            f"{', '.join(map(repr, SLEEP_TAGS))}."
        )
    return tags


def sleep_parts(tags: Iterable[str] | None) -> frozenset[str]:
    """What a sleep frees: everything (None), or the KV cache alone (``["kv_cache"]``);
    raises ``ValueError`` for anything else (weights without their cache are not a state
    the engine can run from)."""
    if tags is None:
        return frozenset(SLEEP_TAGS)
    parts = frozenset(check_tags(tags) or ())
    if parts != {KV_CACHE}:
        raise ValueError(
            f"only the KV cache can sleep alone (tags ['kv_cache']), got {sorted(parts)}."
        )
    return parts


def to_wake(asleep: frozenset[str], tags: Iterable[str] | None) -> frozenset[str]:
    """Which of the ``asleep`` parts ``tags`` wakes (None: all of them)."""
    wanted = set(SLEEP_TAGS) if tags is None else set(tags)
    return asleep & wanted
