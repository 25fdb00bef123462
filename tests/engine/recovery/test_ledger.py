"""RequestLedger: the child index and the step's delivery (engine/recovery/ledger.py)."""

from __future__ import annotations

from actorllm.core.outputs import RequestOutput
from actorllm.core.sampling_params import SamplingParams
from actorllm.engine.recovery.ledger import RequestLedger


def _output(rid: str) -> RequestOutput:
    return RequestOutput(
        request_id=rid,
        prompt=None,
        prompt_token_ids=[1],
        prompt_logprobs=None,
        outputs=[],
        finished=False,
    )


def _open(ledger: RequestLedger, rid: str, children: list[str]) -> None:
    params = SamplingParams()
    ledger.open(rid, None, params, 0, 0.0)
    ledger.record_processed(
        rid,
        prompt_text=None,
        prompt_token_ids=[1],
        eos_token_id=None,
        children=[(c, params) for c in children],
    )


def test_child_finds_the_entry_and_the_child_state_until_closed() -> None:
    ledger = RequestLedger()
    _open(ledger, "r", ["0_r", "1_r"])
    found = ledger.child("1_r")
    assert found is not None
    entry, child = found
    assert entry is ledger.get("r") and child is entry.children["1_r"]
    assert ledger.entry_of_child("0_r") is entry
    ledger.close("r")
    assert ledger.child("1_r") is None and ledger.entry_of_child("0_r") is None


def test_deliver_step_reports_slow_consumers_and_skips_closed_readers() -> None:
    ledger = RequestLedger(max_backlog=2)
    for rid in ("a", "b", "c"):
        _open(ledger, rid, [rid])
    for _ in range(2):
        assert ledger.deliver_step([("a", _output("a")), ("b", _output("b"))]) == []
    ledger.get("c").stream.close_reader()  # type: ignore[union-attr]
    slow = ledger.deliver_step([("a", _output("a")), ("c", _output("c"))])
    assert slow == ["a"]  # two unread: refused, marked slow
    assert ledger.get("a").slow and len(ledger.get("a").stream) == 2  # type: ignore[union-attr]
    assert not ledger.get("c").slow  # type: ignore[union-attr]
