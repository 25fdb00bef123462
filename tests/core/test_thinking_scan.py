"""The incremental thinking scan answers as the full scan (``forced_token``) does, on
random histories fed in random pieces, with drafts read on top, cut short (a rebuilt
request) and replayed into a fresh scan (a worker rebuilt after a crash)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from actorllm.core.thinking_budget import ThinkingMarkers, forced_token
from actorllm.core.thinking_scan import ThinkingScan

# A small alphabet, so markers, their prefixes and overlaps occur often.
TOKENS = st.integers(0, 3)
MARKER = st.lists(TOKENS, min_size=1, max_size=3).map(tuple)
MARKERS = st.builds(lambda s, e: ThinkingMarkers(start=s, end=e), MARKER, MARKER).filter(
    lambda m: m.start != m.end
)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("feed"), st.lists(TOKENS, max_size=7)),
        st.tuples(st.just("cut"), st.integers(0, 30)),
        st.tuples(st.just("replay"), st.integers(1, 6)),
    ),
    max_size=25,
)


def _agrees(
    scan: ThinkingScan, history: list[int], markers: ThinkingMarkers, drafts: list[int]
) -> None:
    assert scan.length == len(history)
    for budget in range(5):
        for tail in ([], drafts[:1], drafts):
            want = forced_token([*history, *tail], markers, budget)
            assert scan.forced(tail, budget) == want, (history, tail, budget)


def _catch_up(scan: ThinkingScan, history: list[int]) -> None:
    start = scan.resume(len(history))
    scan.feed(history[start:])


@settings(max_examples=400, deadline=None)
@given(
    markers=MARKERS,
    prompt=st.lists(TOKENS, max_size=8),
    ops=OPS,
    drafts=st.lists(TOKENS, max_size=3),
)
def test_the_scan_answers_as_the_full_scan(
    markers: ThinkingMarkers, prompt: list[int], ops: list[tuple[str, object]], drafts: list[int]
) -> None:
    history = list(prompt)
    scan = ThinkingScan(markers)
    _catch_up(scan, history)
    _agrees(scan, history, markers, drafts)
    for op, arg in ops:
        if op == "feed":
            assert isinstance(arg, list)
            history += arg
            _catch_up(scan, history)
        elif op == "cut":  # a shorter history: read again from its start
            assert isinstance(arg, int)
            history = history[:arg]
            _catch_up(scan, history)
        else:  # a fresh scan fed the whole history in pieces of ``arg`` tokens
            assert isinstance(arg, int)
            scan = ThinkingScan(markers)
            for i in range(0, len(history), arg):
                scan.feed(history[i : i + arg])
        _agrees(scan, history, markers, drafts)


def test_drafts_read_on_top_are_not_kept() -> None:
    """A speculative row reads its drafts; a rejected draft leaves nothing behind."""
    m = ThinkingMarkers(start=(1,), end=(2, 3))
    scan = ThinkingScan(m)
    scan.feed([1, 5])
    assert scan.forced([2], budget=1) == 3  # as if the draft END1 were accepted
    assert scan.forced([], budget=1) == 2  # it was not: the marker starts again
    scan.feed([6])
    assert scan.length == 3 and scan.forced([], budget=1) == 2


def test_a_forced_marker_closes_the_section_and_a_new_one_counts_afresh() -> None:
    m = ThinkingMarkers(start=(1,), end=(2,))
    scan = ThinkingScan(m)
    tokens: list[int] = [1]
    scan.feed(tokens)
    for _ in range(8):  # a model that always writes 7, or the forced token
        forced = scan.forced([], budget=2)
        tok = 7 if forced is None else forced
        tokens.append(tok)
        scan.feed([tok])
    assert tokens == [1, 7, 7, 2, 7, 7, 7, 7, 7]
    scan.feed([1, 7, 7])
    assert scan.forced([], budget=2) == 2
