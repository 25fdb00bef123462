"""The protocol is typed: mypy rejects a message sent to a mailbox whose union lacks it."""

from __future__ import annotations

from pathlib import Path

import pytest

SNIPPET = """
from actorllm.engine.actors.messages import AbortRequest, EngineRefs, ExecuteStep


async def wrong(refs: EngineRefs, msg: ExecuteStep) -> None:
    await refs.scheduler.send(msg)


async def right(refs: EngineRefs, msg: AbortRequest) -> None:
    await refs.scheduler.send(msg)
"""


@pytest.mark.slow
def test_mypy_checks_every_send_against_the_receivers_union(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    path = tmp_path / "sends.py"
    path.write_text(SNIPPET)
    # The project's own cache (warm after `make typecheck`) keeps this quick.
    root = Path(__file__).resolve().parents[3]
    stdout, _, status = api.run([str(path), "--cache-dir", str(root / ".mypy_cache")])
    errors = [line for line in stdout.splitlines() if ": error:" in line]
    assert status == 1 and len(errors) == 1, stdout
    assert "sends.py:6:" in errors[0] and '"ExecuteStep"' in errors[0]
