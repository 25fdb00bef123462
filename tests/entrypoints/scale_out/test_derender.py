"""render -> generate -> derender over HTTP (trio and asyncio servers, fake engine): the
pipeline answers what the plain chat / completions route answers (text, finish reason,
logprobs, usage), and derender refuses what it cannot honour with 400s."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import FakeEngine
from tests.entrypoints.server_thread import ServerThread

HI = [{"role": "user", "content": "hi"}]


def post(server: ServerThread, path: str, body: Any) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=30)


def pipeline_chat(server: ServerThread, body: dict[str, Any]) -> dict[str, Any]:
    rendered = post(server, "/v1/chat/completions/render", body).json()
    gen = post(server, "/inference/v1/generate", rendered).json()
    derender = {"generate_response": gen, "prompt_tokens": len(rendered["token_ids"]),
                "prompt_token_ids": rendered["token_ids"], "chat_request": body}  # fmt: skip
    r = post(server, "/v1/chat/completions/derender", derender)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    # derender also passes on the generate response's connector state and metrics
    for key in ("id", "created", "system_fingerprint", "kv_transfer_params", "metrics"):
        a.pop(key, None), b.pop(key, None)
    a["usage"].pop("prompt_tokens_details", None), b["usage"].pop("prompt_tokens_details", None)
    assert a == b


@pytest.mark.parametrize(
    "extra",
    [{"max_tokens": 4}, {"max_tokens": 3, "logprobs": True, "top_logprobs": 2},
     {"max_tokens": 6, "stop": [" brown"]}, {"max_tokens": 3, "n": 2}],
)  # fmt: skip
def test_chat_pipeline_is_the_plain_answer(server: ServerThread, extra: dict[str, Any]) -> None:
    body = {"messages": HI, **extra}
    plain = post(server, "/v1/chat/completions", body).json()
    _same(pipeline_chat(server, body), plain)


@pytest.mark.parametrize(
    "extra",
    [{"max_tokens": 4}, {"max_tokens": 3, "logprobs": 2}, {"max_tokens": 2, "echo": True},
     {"max_tokens": 3, "prompt": ["one", "two"]}],
)  # fmt: skip
def test_completion_pipeline_is_the_plain_answer(
    server: ServerThread, extra: dict[str, Any]
) -> None:
    body = {"prompt": "hello there", **extra}
    plain = post(server, "/v1/completions", body).json()
    rendered = post(server, "/v1/completions/render", body).json()
    gens = [post(server, "/inference/v1/generate", g).json() for g in rendered]
    derender = {"generate_responses": gens,
                "prompt_tokens": [len(g["token_ids"]) for g in rendered],
                "prompt_token_ids": [g["token_ids"] for g in rendered],
                "completion_request": body}  # fmt: skip
    r = post(server, "/v1/completions/derender", derender)
    assert r.status_code == 200, r.text
    _same(r.json(), plain)


def test_without_chat_request_plain_detokenization(server: ServerThread) -> None:
    gen = post(server, "/inference/v1/generate",
               {"token_ids": [1, 2], "sampling_params": {"max_tokens": 3}}).json()  # fmt: skip
    got = post(server, "/v1/chat/completions/derender", {"generate_response": gen}).json()
    assert got["id"] == gen["request_id"] and got["model"] == "fake-model"
    assert got["choices"][0]["message"]["content"].strip()
    assert got["usage"] == {"prompt_tokens": 0, "completion_tokens": 3, "total_tokens": 3,
                            "prompt_tokens_details": None,
                            "completion_tokens_details": None}  # fmt: skip


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/completions/derender", {"generate_responses": []}, "generate_responses"),
        ("/v1/completions/derender",
         {"generate_responses": [{"request_id": "a", "choices": []}], "prompt_tokens": [1, 2]},
         "prompt_tokens"),
        ("/v1/chat/completions/derender",
         {"generate_response": {"request_id": "a", "choices": [], "output_mode": "text"}},
         "output_mode"),
        ("/v1/chat/completions/derender",
         {"stream": True, "generate_chunk": {"request_id": "a", "choices": [
             {"index": 0, "token_ids": [1]}]},
          "stream_state": {"output_token_ids": [1], "output_chunk_lens": [2]}},
         "stream_state"),
        ("/v1/chat/completions/derender", {"generate_response": {"choices": []}}, None),
    ],
)  # fmt: skip
def test_refusals(server: ServerThread, path: str, body: dict[str, Any], param: str | None) -> None:
    r = post(server, path, body)
    assert r.status_code == 400, r.text
    if param is not None:
        assert r.json()["error"]["param"] == param


def _stream_derender(
    server: ServerThread, path: str, chunks: list[dict[str, Any]], extra: dict[str, Any]
) -> list[dict[str, Any]]:
    """Each generate chunk through the streaming derender, its state carried along."""
    state, out = None, []
    for chunk in chunks:
        r = post(server, path, {"stream": True, "generate_chunk": chunk, "stream_state": state,
                                **extra})  # fmt: skip
        assert r.status_code == 200, r.text
        state = r.json()["stream_state"]
        out.append(r.json()["chunk"])
    return out


def _generate_chunks(server: ServerThread, rendered: dict[str, Any]) -> list[dict[str, Any]]:
    r = post(server, "/inference/v1/generate", {**rendered, "stream": True})
    lines = [ln[6:] for ln in r.text.splitlines() if ln.startswith("data: ")]
    return [json.loads(ln) for ln in lines if ln != "[DONE]"]


@pytest.mark.parametrize("extra", [{"max_tokens": 5}, {"max_tokens": 8, "stop": [" brown"]}])
def test_streamed_chat_pipeline_is_the_plain_stream(
    server: ServerThread, extra: dict[str, Any]
) -> None:
    body = {"messages": HI, "stream": True, **extra}
    plain = post(server, "/v1/chat/completions", body).text
    events = [json.loads(ln[6:]) for ln in plain.splitlines()
              if ln.startswith("data: ") and ln != "data: [DONE]"]  # fmt: skip
    want = "".join(e["choices"][0]["delta"].get("content") or "" for e in events)
    rendered = post(server, "/v1/chat/completions/render", body).json()
    chunks = _stream_derender(
        server, "/v1/chat/completions/derender", _generate_chunks(server, rendered),
        {"chat_request": body, "prompt_token_ids": rendered["token_ids"]},
    )  # fmt: skip
    choices = [c for chunk in chunks for c in chunk["choices"]]
    assert choices[0]["delta"]["role"] == "assistant"
    assert "".join(c["delta"].get("content") or "" for c in choices) == want
    finish = [c["finish_reason"] for c in choices if c["finish_reason"]]
    assert finish == [events[-1]["choices"][0]["finish_reason"]]


def test_streamed_completion_pipeline_is_the_plain_text(server: ServerThread) -> None:
    body = {"prompt": "hello there", "max_tokens": 5}
    want = post(server, "/v1/completions", body).json()["choices"][0]["text"]
    (rendered,) = post(server, "/v1/completions/render", body).json()
    chunks = _stream_derender(
        server, "/v1/completions/derender", _generate_chunks(server, rendered),
        {"completion_request": body, "prompt_token_ids": rendered["token_ids"]},
    )  # fmt: skip
    assert "".join(c["text"] for chunk in chunks for c in chunk["choices"]) == want


SPEC = {"mean_acceptance_length": 2.0, "draft_acceptance_rate": 0.5,
        "acceptance_histogram": [0, 1], "num_spec_steps": 1, "num_accepted_draft_tokens": 1,
        "num_draft_tokens": 2, "num_spec_tokens": 1}  # fmt: skip


def test_chat_passes_on_what_generate_carries(server: ServerThread) -> None:
    """vLLM's chat answer keeps the generate response's prompt_logprobs, connector state
    and metrics (every metric named, null when not given)."""
    gen = {"request_id": "g", "choices": [{"index": 0, "token_ids": [5, 6]}],
           "prompt_logprobs": [None, {"5": {"logprob": -1.0}}], "kv_transfer_params": {"k": 1},
           "metrics": {"queue_time_ms": 3.0, "speculative_decoding": SPEC}}  # fmt: skip
    got = post(server, "/v1/chat/completions/derender", {"generate_response": gen}).json()
    assert got["prompt_logprobs"] == gen["prompt_logprobs"]
    assert got["kv_transfer_params"] == {"k": 1}
    assert got["metrics"] == {"time_to_first_token_ms": None, "generation_time_ms": None,
                              "queue_time_ms": 3.0, "mean_itl_ms": None,
                              "tokens_per_second": None,
                              "speculative_decoding": {**SPEC, "per_step_accepted": None,
                                                       "per_step_drafted": None}}  # fmt: skip


def test_completion_passes_on_what_its_responses_agree_on(server: ServerThread) -> None:
    def gen(kv: Any) -> dict[str, Any]:
        return {"request_id": "g", "choices": [{"index": 0, "token_ids": [5]}],
                "kv_transfer_params": kv, "metrics": {"queue_time_ms": 1.0}}  # fmt: skip

    def answer(*gens: dict[str, Any]) -> dict[str, Any]:
        r = post(server, "/v1/completions/derender", {"generate_responses": list(gens)})
        assert r.status_code == 200, r.text
        return dict(r.json())

    one = answer(gen({"node": "a"}))
    assert one["kv_transfer_params"] == {"node": "a"}
    assert one["metrics"]["queue_time_ms"] == 1.0
    same = answer(gen({"node": "a"}), gen({"node": "a"}))
    assert same["kv_transfer_params"] == {"node": "a"}
    assert same["metrics"] is None  # one prompt's metrics each: not merged
    assert answer(gen({"node": "a"}), gen({"node": "b"}))["kv_transfer_params"] is None


def test_streamed_chunks_pass_on_metrics_and_the_callers_prompt_tokens(
    server: ServerThread,
) -> None:
    """vLLM's streamed derender: a usage chunk counts the caller's ``prompt_tokens`` over
    generate's, and each chunk carries the generate chunk's metrics."""
    chunk = {"request_id": "g", "choices": [],
             "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
             "metrics": {"mean_itl_ms": 2.5}}  # fmt: skip
    for path in ("/v1/chat/completions/derender", "/v1/completions/derender"):
        r = post(server, path, {"stream": True, "generate_chunk": chunk, "prompt_tokens": 9})
        got = r.json()["chunk"]
        assert got["usage"]["prompt_tokens"] == 9 and got["usage"]["total_tokens"] == 13
        assert got["metrics"]["mean_itl_ms"] == 2.5
        r = post(server, path, {"stream": True, "generate_chunk": chunk})
        assert r.json()["chunk"]["usage"]["prompt_tokens"] == 3


def test_streamed_chat_under_a_parser_needs_the_prompt() -> None:
    """vLLM's rule: with a reasoning parser, whether the prompt left reasoning open is read
    from prompt_token_ids, so a streamed chat derender without them is a 400."""
    srv = start_server(FakeEngine(reasoning_parser="qwen3"), enable_scale_out=True)
    try:
        body = {"stream": True, "chat_request": {"messages": HI},
                "generate_chunk": {"request_id": "g", "choices": [
                    {"index": 0, "token_ids": [5]}]}}  # fmt: skip
        r = post(srv, "/v1/chat/completions/derender", body)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "prompt_token_ids"
        ok = post(srv, "/v1/chat/completions/derender", {**body, "prompt_token_ids": [1, 2]})
        assert ok.status_code == 200, ok.text
    finally:
        srv.stop()


@pytest.mark.parametrize("parser", [None, "qwen3"])
def test_streamed_chat_holds_back_characters_split_across_chunks(parser: str | None) -> None:
    """A character whose bytes span two generate chunks is shown once all its bytes came
    (vLLM's incremental detokenizer): no chunk carries a replacement character."""
    engine = FakeEngine(reasoning_parser=parser) if parser else FakeEngine()
    srv = start_server(engine, enable_scale_out=True)
    try:
        text = "思考中 你好世界 😀"
        ids = engine.tokenizer.encode(text, add_special_tokens=False)
        assert len(ids) > len(text)  # byte-level pieces: characters span tokens
        chunks = [{"request_id": "g", "choices": [{"index": 0, "token_ids": [t],
                   "finish_reason": "stop" if i == len(ids) - 1 else None}]}
                  for i, t in enumerate(ids)]  # fmt: skip
        out = _stream_derender(
            srv, "/v1/chat/completions/derender", chunks,
            {"chat_request": {"messages": HI}, "prompt_token_ids": [1, 2]},
        )  # fmt: skip
        deltas = [c["delta"] for chunk in out for c in chunk["choices"]]
        pieces = [d.get(k) or "" for d in deltas for k in ("reasoning", "content")]
        assert all("\ufffd" not in p for p in pieces), pieces
        assert "".join(pieces) == engine.tokenizer.decode(ids)
    finally:
        srv.stop()


def _full_decode_streamed(body: bytes) -> bool:
    """The dispatch as a whole decode of the body reads it (the reference)."""
    import msgspec

    raw = msgspec.json.decode(body)
    return isinstance(raw, dict) and raw.get("stream") is True


def _outcome(fn: Any, body: bytes) -> tuple[str, Any]:
    import msgspec

    try:
        return "ok", fn(body)
    except msgspec.DecodeError as exc:
        return type(exc).__name__, str(exc)


def test_the_dispatch_reads_stream_without_building_the_body() -> None:
    """The derender routes build the body once, typed; the dispatch on ``stream`` skips
    the rest. It answers, or fails with the message, that a whole decode does: on every
    cut of a body, on bodies that are not objects, on a stream that is not true."""
    from actorllm.entrypoints.openai.app.scale_out_routes import _streamed

    body = json.dumps({
        "stream": True, "model": "m", "chat_request": {"messages": HI},
        "generate_chunk": {"request_id": "a", "choices": [
            {"index": 0, "token_ids": [1, 2], "logprobs": {"content": [
                {"token": "x", "logprob": -0.5, "top_logprobs": []}]}}]},
    }).encode()  # fmt: skip
    odd = [b"[1, 2]", b"null", b'"s"', b"", b" ", b'{"stream": 1}', b'{"stream": "true"}',
           b'{"stream": true, "stream": false}', b'{"stream": tru}', b"[{"]  # fmt: skip
    cuts = [body[:i] + tail for i in range(len(body) + 1) for tail in (b"", b"]", b"x")]
    for b in [*odd, *cuts, b"[" + body]:
        assert _outcome(_streamed, b) == _outcome(_full_decode_streamed, b), b


@pytest.mark.parametrize(
    ("body", "message"),
    [(b"[1, 2]", "Expected `object`, got `array`"),
     (b"[1,", "The request body is not valid JSON: Input data was truncated"),
     (b'{"stream": true, "generate_chunk": {', "The request body is not valid JSON: "
      "Input data was truncated"),
     (b'{"stream": true}', "Object missing required field `generate_chunk`"),
     (b"{}", "Object missing required field `generate_response`")],
)  # fmt: skip
def test_malformed_bodies_are_named(server: ServerThread, body: bytes, message: str) -> None:
    r = httpx.post(
        server.url + "/v1/chat/completions/derender",
        content=body,
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"] == message
