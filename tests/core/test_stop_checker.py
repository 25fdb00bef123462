"""Stop strings: search window, winner rules, truncation and hold-back."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actorllm.core.stop_checker import StopChecker, StopMatch


def feed(checker: StopChecker, chunks: list[str]) -> tuple[str, StopMatch | None, list[str]]:
    """Stream ``chunks`` as the output processor does; return (final text, match, emitted)."""
    text, emitted_upto, emitted = "", 0, []
    for chunk in chunks:
        start = len(text)
        text += chunk
        match = checker.check(text, start)
        if match is not None:
            text = text[: match.truncate_to]
            emitted.append(text[emitted_upto:])
            return text, match, emitted
        visible = checker.visible_len(len(text), finished=False)
        emitted.append(text[emitted_upto:visible])
        emitted_upto = max(emitted_upto, visible)
    emitted.append(text[emitted_upto:])
    return text, None, emitted


def test_split_across_deltas_is_never_emitted_partially() -> None:
    checker = StopChecker(["</answer>"], include_in_output=False)
    assert checker.hold_back == len("</answer>") - 1
    text, match, emitted = feed(checker, ["The result is 4", "2</ans", "wer> trailing"])
    assert match == StopMatch("</answer>", len("The result is 42"))
    assert text == "The result is 42"
    assert all("<" not in e for e in emitted)  # no piece of the stop string ever shown
    assert "".join(emitted) == text


def test_held_back_text_is_released_when_it_cannot_be_a_stop() -> None:
    checker = StopChecker(["STOP"], include_in_output=False)
    _, match, emitted = feed(checker, ["abcdef", "gh"])
    assert match is None
    assert emitted == ["abc", "de", "fgh"]  # the last piece when the request finishes


def test_stop_at_the_very_start() -> None:
    checker = StopChecker(["Hi"], include_in_output=False)
    assert checker.check("Hi there", 0) == StopMatch("Hi", 0)
    text, _, emitted = feed(checker, ["H", "i", "!"])
    assert text == "" and "".join(emitted) == ""


def test_include_stop_str_in_output() -> None:
    checker = StopChecker(["END"], include_in_output=True)
    assert checker.hold_back == 0  # cutting at the end never takes back shown text
    text, match, emitted = feed(checker, ["one E", "N", "D two"])
    assert match is not None and match.stop == "END"
    assert text == "one END"
    assert "".join(emitted) == "one END"


def test_several_stop_strings_first_completed_wins() -> None:
    checker = StopChecker(["world", "lo"], include_in_output=False)
    # "lo" completes (at 'o' of hello) before "world" does.
    assert checker.check("hello world", 0) == StopMatch("lo", 3)
    checker = StopChecker(["zzz", "wor"], include_in_output=False)
    assert checker.check("hello world", 0) == StopMatch("wor", 6)


def test_overlapping_stops_completing_together_longest_wins() -> None:
    for stops in (["end", "the end"], ["the end", "end"]):
        checker = StopChecker(stops, include_in_output=False)
        assert checker.check("at the end.", 0) == StopMatch("the end", 3)
    # A shorter stop that completes earlier still wins over a longer overlapping one.
    checker = StopChecker(["abc", "b"], include_in_output=False)
    assert checker.check("xabc", 0) == StopMatch("b", 2)


def test_only_new_text_and_window_are_searched() -> None:
    checker = StopChecker(["ab"], include_in_output=False)
    # "ab" lies wholly before new_start: it was searched by an earlier call.
    assert checker.check("ab cd", 3) is None
    # Straddling new_start: found.
    assert checker.check("xa" + "b", 2) == StopMatch("ab", 1)
    assert checker.check("abc", 3) is None  # nothing new


def test_no_stops() -> None:
    checker = StopChecker([], include_in_output=False)
    assert not checker and checker.hold_back == 0
    assert checker.check("anything", 0) is None
    with pytest.raises(ValueError):
        StopChecker([""], include_in_output=False)


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet="abc ", max_size=30),
    stops=st.lists(st.text(alphabet="abc", min_size=1, max_size=4), min_size=1, max_size=3),
    cuts=st.lists(st.integers(0, 30), max_size=6),
    include=st.booleans(),
)
def test_result_does_not_depend_on_chunking(
    text: str, stops: list[str], cuts: list[int], include: bool
) -> None:
    checker = StopChecker(stops, include_in_output=include)
    bounds = sorted({0, len(text), *(c for c in cuts if c < len(text))})
    chunks = [text[a:b] for a, b in itertools.pairwise(bounds)]
    chunked = feed(checker, chunks)
    by_char = feed(checker, list(text))
    assert chunked[:2] == by_char[:2]
    final_text, match, emitted = chunked
    assert "".join(emitted) == final_text  # what was shown is exactly the final text
    if match is None:
        assert not any(s in text for s in stops)
    else:
        cut = final_text if include else final_text + match.stop
        assert text.startswith(cut)
        # No stop string completes before the chosen one.
        assert not any(s in cut[:-1] for s in stops)
