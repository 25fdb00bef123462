"""Structured-outputs request fields over HTTP (the fake engine records what it was
asked): errors name the field inside ``structured_outputs``, options reach the engine."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import FakeEngine
from tests.entrypoints.test_request_fields import asked, post


@pytest.fixture(scope="module")
def fake() -> FakeEngine:
    return FakeEngine(max_model_len=64)


@pytest.fixture(scope="module")
def http(fake: FakeEngine) -> Iterator[httpx.Client]:
    srv = start_server(fake)
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        yield c
    srv.stop()


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"structured_outputs": {"regex": "a", "disable_fallbak": True}},
         "structured_outputs.disable_fallbak"),  # a typo is refused, never dropped
        ({"structured_outputs": {"regex": 5}}, "structured_outputs.regex"),
        ({"structured_outputs": {"choice": []}}, "structured_outputs.choice"),
        ({"guided_choice": []}, "guided_choice"),
        ({"response_format": {"type": "xml"}}, "response_format"),
    ],
)  # fmt: skip
def test_structured_outputs_errors_name_the_field_inside(
    http: httpx.Client, body: dict, param: str
) -> None:
    err = post(http, "/v1/completions", {"prompt": "x", **body}, 400)["error"]
    assert err["param"] == param, err


def test_structured_outputs_options_reach_the_engine(http: httpx.Client, fake: FakeEngine) -> None:
    post(http, "/v1/completions", {"prompt": "x", "structured_outputs": {
        "regex": "a+", "disable_fallback": True, "backend": "auto"}})  # fmt: skip
    so = asked(fake)[1].structured_outputs
    assert so is not None and so.regex == "a+" and so.disable_fallback
