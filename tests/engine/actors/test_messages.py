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

# Only the mailboxes, the messages and anyio are read: everything else they import is
# skipped (Any). The whole import graph (torch's included) took 130 s on CI's clean clone.
CONFIG = """
[mypy]
follow_imports = skip
ignore_missing_imports = True

[mypy-actorllm.actors.*,actorllm.engine.actors.messages,anyio,anyio.*]
follow_imports = normal
"""


def test_mypy_checks_every_send_against_the_receivers_union(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    path = tmp_path / "sends.py"
    path.write_text(SNIPPET)
    (tmp_path / "mypy.ini").write_text(CONFIG)
    stdout, _, status = api.run(
        [str(path), "--config-file", str(tmp_path / "mypy.ini"), "--cache-dir", str(tmp_path)]
    )
    errors = [line for line in stdout.splitlines() if ": error:" in line]
    assert status == 1 and len(errors) == 1, stdout
    assert "sends.py:6:" in errors[0] and '"ExecuteStep"' in errors[0]
