"""Precise blame (engine/recovery/blame.py), with plain calls."""

import random

from actorllm.engine.recovery.blame import MAX_ALONE, Blame


def test_a_batch_crash_makes_everyone_a_suspect_and_fails_nobody():
    blame = Blame()
    assert blame.crash("core", ["a", "b", "c"]) == []
    assert sorted(blame.suspects("core")) == ["a", "b", "c"]


def test_bystanders_of_known_suspects_are_not_charged():
    blame = Blame()
    blame.crash("core", ["a", "b"])
    blame.cleared("core", ["b"])  # b ran a step: innocent
    assert blame.crash("core", ["a", "b", "c"]) == []
    assert blame.suspects("core") == ["a"]  # a alone is charged; b and c stay clear


def test_a_request_is_poison_when_it_crashes_again_replayed_alone():
    blame = Blame()
    for _ in range(MAX_ALONE - 1):
        assert blame.crash("router", ["p"]) == []  # alone: retried
    assert blame.crash("router", ["p"]) == ["p"]  # alone once more: poison
    assert not blame.is_suspect("router", "p")
    assert blame.statistics().failed == 1


def test_a_suspect_in_company_is_not_failed_even_after_many_crashes():
    blame = Blame()
    for _ in range(10):
        assert blame.crash("core", ["a", "b"]) == []
    assert blame.crash("core", ["a", "z"]) == []  # the only suspect, still in company
    for _ in range(MAX_ALONE - 1):
        assert blame.crash("core", ["a"]) == []  # bisection: a replayed alone
    assert blame.crash("core", ["a"]) == ["a"]


def test_scopes_are_independent():
    blame = Blame()
    for _ in range(MAX_ALONE - 1):
        blame.crash("output_processor", ["a"])
        blame.cleared("core", ["a"])  # a model step is no proof for the output processor
    assert blame.crash("output_processor", ["a"]) == ["a"]
    for _ in range(MAX_ALONE - 1):
        blame.crash("router", ["b"])
    blame.cleared("router", ["b"])  # handled: the count starts over
    assert blame.crash("router", ["b"]) == []


def test_forget_and_clear():
    blame = Blame()
    blame.crash("core", ["a", "b"])
    blame.forget("a")
    blame.cleared("core", ["b", "zzz"])
    assert not blame.has_suspects("core")


def test_unrelated_crashes_never_fail_a_request_in_company():
    """A request lives through 1000 crashes, each in a batch of two or more, each followed
    by a step that completes (as the engine replays suspects): never failed."""
    rng = random.Random(0)
    blame = Blame()
    ids = [f"r{i}" for i in range(16)]
    for _ in range(1000):
        batch = ["r0", *rng.sample(ids[1:], rng.randint(1, 7))]
        assert blame.crash("core", batch) == []
        blame.cleared("core", batch)
