"""The thinking budget read off token ids: counting, forcing the end marker, and the same
answer for a request rebuilt from its tokens (preemption, replay from the ledger)."""

from __future__ import annotations

from actorllm.core.thinking_budget import ThinkingMarkers, forced_token

START, END1, END2 = 100, 101, 102
ONE = ThinkingMarkers(start=(START,), end=(END1,))
TWO = ThinkingMarkers(start=(START,), end=(END1, END2))


def _run(prompt: list[int], markers: ThinkingMarkers, budget: int, steps: int) -> list[int]:
    """Greedy decode of a model that always wants token 7: the forced token wins."""
    tokens = list(prompt)
    for _ in range(steps):
        forced = forced_token(tokens, markers, budget)
        tokens.append(7 if forced is None else forced)
    return tokens[len(prompt) :]


def test_budget_n_thinks_n_tokens_then_the_end_marker() -> None:
    out = _run([1, 2, START], ONE, budget=3, steps=6)
    assert out == [7, 7, 7, END1, 7, 7]


def test_end_marker_of_several_tokens_is_forced_one_per_step() -> None:
    out = _run([1, START], TWO, budget=2, steps=6)
    assert out == [7, 7, END1, END2, 7, 7]


def test_budget_zero_ends_at_once_when_thinking() -> None:
    assert _run([1, START], TWO, budget=0, steps=3) == [END1, END2, 7]


def test_budget_larger_than_the_output_forces_nothing() -> None:
    assert _run([1, START], ONE, budget=50, steps=5) == [7] * 5


def test_not_thinking_forces_nothing() -> None:
    assert _run([1, 2], ONE, budget=0, steps=3) == [7, 7, 7]
    assert _run([START, 5, END1], ONE, budget=0, steps=3) == [7, 7, 7]


def test_output_that_opens_thinking_itself_is_counted_from_its_marker() -> None:
    tokens = [1]
    for want in (START, 7, 7):  # the model writes the start marker, then thinks
        assert forced_token(tokens, ONE, 2) is None
        tokens.append(want)
    assert forced_token(tokens, ONE, 2) == END1
    # Budget 0: the step after the model's own start marker ends the section.
    assert forced_token([1, START], ONE, 0) == END1


def test_prompt_thinking_counts_against_the_budget() -> None:
    # The prompt already holds two thinking tokens: one more, then the end.
    assert _run([START, 5, 6], ONE, budget=3, steps=3) == [7, END1, 7]
    # Past the budget already: the end comes first.
    assert _run([START, 5, 6, 8], TWO, budget=1, steps=3) == [END1, END2, 7]


def test_a_natural_end_marker_closes_the_section() -> None:
    tokens = [START, 5, END1, END2]
    assert forced_token(tokens, TWO, 0) is None
    # A new section after it gets a fresh budget.
    assert forced_token([*tokens, START, 7], TWO, 2) is None
    assert forced_token([*tokens, START, 7, 7], TWO, 2) == END1


def test_thinking_token_equal_to_the_markers_first_token_still_counts() -> None:
    # The model itself wrote END1 as its last thinking token (not followed by END2): the
    # forced marker starts after it.
    assert forced_token([START, 7, END1], TWO, 2) == END1
    assert forced_token([START, 7, END1, END1], TWO, 2) == END2


def test_rebuilt_from_tokens_every_step_agrees_with_a_straight_run() -> None:
    # A replayed or preempted request holds prompt + outputs so far and nothing else:
    # stopping anywhere and asking again gives the same next token.
    full = _run([1, START], TWO, budget=4, steps=9)
    for cut in range(len(full)):
        prefix = [1, START, *full[:cut]]
        assert (forced_token(prefix, TWO, 4) or 7) == full[cut]
