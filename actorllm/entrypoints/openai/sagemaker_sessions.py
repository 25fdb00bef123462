"""SageMaker's stateful sessions on ``/invocations``, as vLLM serves them (through AWS's
model-hosting-container-standards): on with ``SAGEMAKER_ENABLE_STATEFUL_SESSIONS=true``,
each session living ``SAGEMAKER_SESSIONS_EXPIRATION`` seconds (1200 by default).

A body that is exactly ``{"requestType": "NEW_SESSION"}`` opens a session (200, ``Session
ID created``, header ``X-Amzn-SageMaker-New-Session-Id: ID; Expires=<UTC time>``); exactly
``{"requestType": "CLOSE"}`` with ``X-Amzn-SageMaker-Session-Id: ID`` closes it (200,
``Session ID closed``, header ``X-Amzn-SageMaker-Closed-Session-Id: ID``). Any other
request naming a session runs as usual once the session is known. The library's codes:

* a body with ``requestType`` and anything else, or another type: 400;
* a session header naming no open session: 400 ``Bad request: session not found: ID``;
* CLOSE without the header: 424 ``Failed to close session: invalid session_id: None``;
* sessions off: a session request, or a request with the header, is a 400.

A session holds no state of its own here (the library's session files serve custom
handlers, which are not built): it is an id and an expiry.

    sessions = Sessions.from_env()
    answer = sessions.handle(body, request.headers.get(SESSION_HEADER))  # None: not one
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from actorllm.entrypoints.openai.errors import APIError

SESSION_HEADER = "X-Amzn-SageMaker-Session-Id"
NEW_SESSION_HEADER = "X-Amzn-SageMaker-New-Session-Id"
CLOSED_SESSION_HEADER = "X-Amzn-SageMaker-Closed-Session-Id"
ENABLE_ENV = "SAGEMAKER_ENABLE_STATEFUL_SESSIONS"
EXPIRATION_ENV = "SAGEMAKER_SESSIONS_EXPIRATION"
DEFAULT_EXPIRATION_S = 20 * 60
REQUEST_TYPES = ("NEW_SESSION", "CLOSE")
DISABLED = "Invalid payload. stateful sessions not enabled"


@dataclass(frozen=True)
class SessionAnswer:
    """The reply to a session request: its text and its one header."""

    text: str
    headers: dict[str, str]


@dataclass
class Sessions:
    """The open sessions of one server (``enabled`` False: sessions are refused)."""

    enabled: bool
    expiration_s: float = DEFAULT_EXPIRATION_S
    clock: Callable[[], float] = time.time
    # {session id: its expiry, a clock() time}
    expires: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_env(cls) -> Sessions:
        on = os.environ.get(ENABLE_ENV, "").strip().lower() in ("1", "true", "yes", "on")
        return cls(enabled=on, expiration_s=float(os.environ.get(EXPIRATION_ENV, "1200")))

    def statistics(self) -> dict[str, object]:
        return {"enabled": self.enabled, "open": len(self.expires)}

    def handle(self, body: Any, session_id: str | None) -> SessionAnswer | None:
        """The answer to a session request (NEW_SESSION, CLOSE); None for any other
        request, which may go on (its session, if it names one, is open). Raises APIError
        with the library's status and message."""
        if not (isinstance(body, dict) and "requestType" in body):
            self._check(session_id)
            return None
        kind = body["requestType"]
        if kind not in REQUEST_TYPES or len(body) != 1:
            raise APIError(
                400, f"Invalid session request: a body of only requestType, one of "
                f"{', '.join(REQUEST_TYPES)} (got {sorted(body)}, requestType={kind!r})"
            )  # fmt: skip
        if not self.enabled:
            raise APIError(400, DISABLED)
        if kind == "NEW_SESSION":
            return self._open()
        self._check(session_id)
        if not session_id or session_id not in self.expires:  # none named, or expired
            reason = "session not found" if session_id else "invalid session_id"
            raise APIError(424, f"Failed to close session: {reason}: {session_id}")
        del self.expires[session_id]
        return SessionAnswer(f"Session {session_id} closed", {CLOSED_SESSION_HEADER: session_id})

    def _open(self) -> SessionAnswer:
        now = self.clock()
        self.expires = {s: t for s, t in self.expires.items() if t >= now}  # drop expired
        sid = str(uuid.uuid4())
        self.expires[sid] = now + self.expiration_s
        stamp = datetime.fromtimestamp(self.expires[sid], tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return SessionAnswer(
            f"Session {sid} created", {NEW_SESSION_HEADER: f"{sid}; Expires={stamp}"}
        )

    def _check(self, session_id: str | None) -> None:
        """A named session must be open (an expired one is closed first, as the library's
        manager does, and then passes as no session)."""
        if not session_id:
            return
        if not self.enabled:
            raise APIError(400, f"{DISABLED}, {SESSION_HEADER} header not supported")
        if session_id not in self.expires:
            raise APIError(400, f"Bad request: session not found: {session_id}")
        if self.clock() > self.expires[session_id]:
            del self.expires[session_id]
