"""Each step's weight version: stamped at launch, so a swap between two launches labels
the steps in flight with the version they really ran on."""

from actorllm.engine.scheduling.weight_versions import WeightVersions


def test_steps_in_flight_keep_the_version_they_were_launched_with() -> None:
    v = WeightVersions()
    v.launched(1)
    v.launched(2)  # two in flight (async scheduling)
    v.current = "v1"  # the swap was queued behind them
    v.launched(3)
    assert [v.done(1), v.done(2), v.done(3)] == ["default", "default", "v1"]


def test_a_restart_forgets_the_steps_in_flight() -> None:
    v = WeightVersions()
    v.launched(1)
    v.drain()
    v.current = "v2"
    assert v.done(1) == "v2"  # unknown step: the current version
