"""The lookahead's step-time line and the launch times it gives."""

import pytest

from actorllm.engine.scheduling.lookahead import (
    LEAD_FRACTION,
    LEAD_S,
    MIN_STEPS,
    Lookahead,
    StepCostModel,
)


def test_no_prediction_until_enough_steps_are_timed():
    model = StepCostModel()
    for _ in range(MIN_STEPS - 1):
        model.observe(16, 0.03)
    assert model.predict(16) is None
    model.observe(16, 0.03)
    assert model.predict(16) == pytest.approx(0.03)


def test_the_line_is_fitted_to_steps_of_different_sizes():
    model = StepCostModel()
    for tokens in (16, 16, 2048, 16, 1024, 16, 512):
        model.observe(tokens, 0.02 + 0.0002 * tokens)  # 20 ms a step, 0.2 ms a token
    assert model.predict(16) == pytest.approx(0.0232)
    assert model.predict(1800) == pytest.approx(0.38)


def test_one_size_of_step_scales_up_never_down():
    # Decode steps only: a prefill is predicted proportionally (too long: the safe side).
    model = StepCostModel()
    for _ in range(8):
        model.observe(16, 0.032)
    assert model.predict(1600) == pytest.approx(3.2)
    assert model.predict(4) == pytest.approx(0.032)


def test_a_line_with_a_negative_base_falls_back_to_scaling():
    model = StepCostModel()
    for tokens, seconds in ((100, 0.01), (200, 0.05), (100, 0.01), (200, 0.05)):
        model.observe(tokens, seconds)  # the line through these crosses zero at 75 tokens
    assert model.predict(150) == pytest.approx(0.03 * 150 / 150)


def _trained(la: Lookahead) -> float:
    """MIN_STEPS steps of 16 tokens, 0.1 s each, one after another from 0; returns the time
    the last ended."""
    now = 0.0
    for step in range(MIN_STEPS):
        la.launched(step, 16, now)
        now += 0.1
        la.done(step, now)
    return now


def test_launch_time_is_the_predicted_end_less_the_lead():
    la = Lookahead()
    assert la.launch_at(0.0) is None  # nothing in flight
    now = _trained(la)
    la.launched(10, 16, now)
    assert la.launch_at(now) == pytest.approx(now + 0.1 * (1 - LEAD_FRACTION) - LEAD_S)


def test_a_step_queued_behind_another_is_timed_from_its_predecessors_end():
    la = Lookahead()
    la.launched(1, 16, 0.0)
    la.launched(2, 16, 0.01)  # queued on the worker behind step 1
    la.done(1, 0.1)
    la.done(2, 0.2)  # ran 0.1 s, from 0.1: not 0.19 s from its launch
    assert la.model._steps[-1] == (16, pytest.approx(0.1))
    assert la.early == 1


def test_early_and_late_launches_are_counted():
    la = Lookahead()
    for step in range(MIN_STEPS):
        la.launched(step, 16, float(step))
        la.done(step, step + 0.5)
    la.launched(10, 16, 10.0)
    assert la.launch_at(10.0) > 10.0  # put off
    la.done(10, 10.2)  # ended before the timer: launched on its result
    la.launched(11, 16, 10.2)
    assert (la.early, la.late) == (0, 1)
    assert la.launch_at(10.7) <= 10.7  # due
    la.launched(12, 16, 10.7)
    assert (la.early, la.late) == (1, 1)


def test_a_step_without_tokens_puts_no_launch_off():
    # The step that only carries finished request ids (a batch just ended) runs no model:
    # a request arriving right after it is launched at once, and the line stays as it was.
    la = Lookahead()
    now = _trained(la)
    la.launched(10, 0, now)
    assert la.launch_at(now) is None
    la.done(10, now + 0.001)
    assert la.model.predict(16) == pytest.approx(0.1)
    assert la.early == la.late == 0
