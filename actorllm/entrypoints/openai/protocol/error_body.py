"""OpenAI's error body, the one every failure answers with (``errors.py`` builds it)."""

from __future__ import annotations

import msgspec


class ErrorInfo(msgspec.Struct, kw_only=True):
    message: str
    type: str
    param: str | None = None
    code: int


class ErrorResponse(msgspec.Struct, kw_only=True, omit_defaults=True):
    error: ErrorInfo
    # FastAPI's "Not Found" on a 404 (an unknown route, one the model does not serve), as
    # vLLM's FastAPI app answers; absent otherwise
    detail: str | None = None
