"""The OpenAPI document tells the truth: ``schemathesis run /openapi.json --checks all``
against a real server finds nothing (schema-valid bodies accepted, schema-invalid ones
refused, every status and response body documented, no 5xx), and the bounds that depend
on the served model and settings are stated."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from actorllm.entrypoints.openai.app.routes import DEV_ROUTES, ROUTES, TOKENIZER_INFO_ROUTE
from actorllm.entrypoints.openai.openapi import Served, openapi_document
from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import FakeEngine
from tests.entrypoints.server_thread import ServerThread

MAX_LEN = 512
_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def srv() -> Iterator[ServerThread]:
    server = start_server(FakeEngine(max_model_len=MAX_LEN))
    yield server
    server.stop()


def _schemathesis(srv: ServerThread, tmp_path: Path, *paths: str) -> None:
    schemathesis = Path(sys.executable).with_name("schemathesis")
    env = {
        **os.environ,
        "PYTHONPATH": str(_ROOT),
        "SCHEMATHESIS_HOOKS": "tests.entrypoints.schemathesis_hooks",
        "ACTORLLM_MAX_MODEL_LEN": str(MAX_LEN),
    }
    cmd = [str(schemathesis), "run", srv.url + "/openapi.json", "--checks", "all"]
    cmd += ["--max-examples", "10", "--seed", "1", "--no-color", "--workers", "1", *paths]
    # cwd: schemathesis keeps a cache of its findings there, outside the repository.
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240)
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-2000:]


_NEWER = "^/(v1/(responses|chat/completions/batch|messages)|generative_scoring)"


def test_schemathesis_finds_nothing(srv: ServerThread, tmp_path: Path) -> None:
    _schemathesis(srv, tmp_path, "--exclude-path-regex", _NEWER)


def test_schemathesis_on_responses_and_batch(srv: ServerThread, tmp_path: Path) -> None:
    """The Responses and Messages APIs' routes, the chat batch and generative scoring, in
    a run of their own (each run within the test timeout)."""
    # A list of conversations is slow to generate on a busy machine, and the Responses
    # body's nested unions make hypothesis filter many drafts (how often depends on the
    # whole document, which moves the seeded sequence): those two health checks judge the
    # generator, not the server's answers, and are off for this run.
    _schemathesis(
        srv, tmp_path, "--include-path-regex", _NEWER,
        "--suppress-health-check", "too_slow,filter_too_much",
    )  # fmt: skip


def test_served_bounds_are_stated(srv: ServerThread) -> None:
    doc = httpx.get(srv.url + "/openapi.json").json()
    schemas = doc["components"]["schemas"]
    req = schemas["CompletionRequest"]["properties"]
    vocab = FakeEngine().vocab_size
    assert req["max_tokens"]["anyOf"][0]["maximum"] == MAX_LEN - 1
    assert req["stop_token_ids"]["anyOf"][0]["items"]["maximum"] == vocab - 1
    assert req["priority"]["minimum"] == req["priority"]["maximum"] == 0  # fcfs
    assert "securitySchemes" not in doc["components"]  # no API key: nothing to send
    assert all("security" not in op for ops in doc["paths"].values() for op in ops.values())


def test_harmony_only_responses_fields_are_stated_per_model() -> None:
    """previous_input_messages: a 400 naming it on any model but gpt-oss, so the document
    of another model forbids it; every document states the combinations refused."""

    def request(harmony: bool) -> dict[str, Any]:
        doc = openapi_document(
            dev_mode=False, api_key=False, served=Served(64, 100, "fcfs", harmony=harmony)
        )
        return dict(doc["components"]["schemas"]["ResponsesRequest"])

    other = request(False)
    assert other["properties"]["previous_input_messages"]["type"] == "null"
    assert "enum" not in other["properties"]["enable_response_messages"]
    background_off = {"background": {"enum": [False, None]}}
    assert background_off in [rule["then"]["properties"] for rule in other["allOf"]]
    gpt_oss = request(True)
    assert "array" in str(gpt_oss["properties"]["previous_input_messages"])
    thens = [rule["then"]["properties"] for rule in gpt_oss["allOf"] if "then" in rule]
    assert {"previous_response_id": {"type": "null"}} in thens
    assert {"background": {"enum": [False, None]}} in thens


def test_an_api_key_is_documented_where_it_is_enforced() -> None:
    doc = openapi_document(dev_mode=False, api_key=True, served=Served(64, 100, "priority"))
    completions = doc["paths"]["/v1/completions"]["post"]
    assert completions["security"] == [{"bearer": []}] and "401" in completions["responses"]
    assert "security" not in doc["paths"]["/health"]["get"]
    invocations = doc["paths"]["/invocations"]["post"]  # guarded here (vLLM leaves it open)
    assert invocations["security"] == [{"bearer": []}] and "401" in invocations["responses"]
    body = invocations["requestBody"]["content"]["application/json"]["schema"]["anyOf"]
    assert body[0] == {"$ref": "#/components/schemas/ChatCompletionRequest"}
    assert body[1]["properties"] == {"messages": False}  # else it is a chat request
    priority = doc["components"]["schemas"]["CompletionRequest"]["properties"]["priority"]
    assert priority["minimum"] < 0 < priority["maximum"]  # the priority policy takes any


# Served but not in the document (yet): the liveness alias, the document itself, and the
# dev routes added after the document's dev section.
_UNDOCUMENTED = {("/openapi.json", "GET")}  # FastAPI leaves its own route out too


def test_the_document_lists_the_route_table() -> None:
    """Every route the app can serve is documented (or named in _UNDOCUMENTED), and the
    document names no route the app lacks."""
    documented = set()
    # A generative model's document, an embedding model's and a cross-encoder's: each lists
    # the routes that serve that model (the others answer 400).
    for tasks, cross in (((), False), (("embed", "token_embed"), False), (("classify",), True)):
        served = Served(64, 100, "fcfs", tokenizer_info=True, pooling_tasks=tasks,
                        cross_encoder=cross)  # fmt: skip
        doc = openapi_document(dev_mode=True, api_key=False, served=served)
        documented |= {(path, m.upper()) for path, ops in doc["paths"].items() for m in ops}
    table = {(path, method) for path, _, method in [*ROUTES, *DEV_ROUTES, TOKENIZER_INFO_ROUTE]}
    assert documented == table - _UNDOCUMENTED


def test_a_pooling_model_documents_pooling_routes_only() -> None:
    embed = Served(64, 100, "fcfs", pooling_tasks=("embed", "token_embed"))
    paths = openapi_document(dev_mode=False, api_key=False, served=embed)["paths"]
    assert "/v1/embeddings" in paths and "/score" in paths and "/classify" not in paths
    assert "/v1/completions" not in paths
    # /invocations takes the pooling requests it routes to (vLLM's SageMaker route)
    body = paths["/invocations"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"]["anyOf"][-1] == {"$ref": "#/components/schemas/EmbeddingRequest"}
    generative = openapi_document(dev_mode=False, api_key=False, served=Served(64, 100, "fcfs"))
    assert "/v1/embeddings" not in generative["paths"]
