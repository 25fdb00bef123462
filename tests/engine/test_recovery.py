import math

import anyio

from actorllm.core.sampling_params import SamplingParams
from actorllm.engine.ledger import RequestLedger
from actorllm.engine.recovery import MAX_CRASHES, charge_crash, clear_suspects


def ledger_with(*ids: str) -> RequestLedger:
    ledger = RequestLedger()
    for i, rid in enumerate(ids):
        ledger.open(rid, "p", SamplingParams(), 0, float(i))
    return ledger


def test_first_crash_makes_everyone_involved_a_suspect():
    ledger = ledger_with("a", "b", "c")
    assert charge_crash(ledger, ["a", "b"]) == []
    assert [ledger.get(r).suspect for r in "abc"] == [True, True, False]


def test_second_crash_with_a_suspect_charges_only_the_suspect():
    ledger = ledger_with("a", "b", "c")
    charge_crash(ledger, ["a", "b"])
    clear_suspects(ledger, ["b"])  # b ran a step on its own: innocent
    assert charge_crash(ledger, ["a", "b", "c"]) == ["a"]
    assert ledger.get("b").crash_count == 0 and not ledger.get("c").suspect


def test_poison_alone_reaches_the_limit():
    ledger = ledger_with("p")
    for _ in range(MAX_CRASHES - 1):
        assert charge_crash(ledger, ["p"]) == []
    assert charge_crash(ledger, ["p"]) == ["p"]


def test_unknown_ids_are_ignored():
    ledger = ledger_with("a")
    assert charge_crash(ledger, ["zzz"]) == []
    assert clear_suspects(ledger, ["zzz"]) == []


def test_ledger_delivers_and_closes():
    async def main() -> None:
        ledger = RequestLedger()
        receive = ledger.open("r", "p", SamplingParams(), 0, 0.0)
        assert ledger.deliver("r", ValueError("x"))
        ledger.close("r", KeyError("done"))
        items = [item async for item in receive]
        assert [type(i) for i in items] == [ValueError, KeyError]
        assert "r" not in ledger and not ledger.deliver("r", ValueError())
        assert math.isinf(receive.statistics().max_buffer_size)

    anyio.run(main)
