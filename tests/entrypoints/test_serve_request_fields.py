"""vLLM's request fields end to end: a real ``actorllm serve`` process (the demo model, random
weights, so only what the fields promise is checked), driven by the official ``openai``
client and by plain ``httpx``. One test per field: each would fail if the field were
dropped on the way to the engine."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.entrypoints.serve_process import ServeProcess

pytestmark = pytest.mark.slow
MAX_LEN = 256


@pytest.fixture(scope="module")
def srv() -> Iterator[ServeProcess]:
    # --max-logprobs above vLLM's default 20: the server starts and serves up to it.
    argv = ["--max-model-len", str(MAX_LEN), "--metrics-prefix", "vllm", "--max-logprobs", "30",
            "--enable-prompt-tokens-details"]  # fmt: skip
    with ServeProcess(argv) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(srv: ServeProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0) as c:
        yield c


@pytest.fixture(scope="module")
def http(srv: ServeProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=srv.url, timeout=60) as c:
        yield c


def complete(http: httpx.Client, **body: Any) -> dict[str, Any]:
    r = http.post("/v1/completions", json={"prompt": "Once upon a time", **body})
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def token_ids(choice: dict[str, Any]) -> list[int]:
    """The sampled ids, read from logprobs rendered with return_tokens_as_token_ids."""
    return [int(t.removeprefix("token_id:")) for t in choice["logprobs"]["tokens"]]


def ids_of(http: httpx.Client, text: str) -> list[int]:
    r = http.post("/tokenize", json={"prompt": text})
    tokens: list[int] = r.json()["tokens"]
    return tokens


GREEDY: dict[str, Any] = {"temperature": 0, "logprobs": 0, "return_tokens_as_token_ids": True}


def test_return_tokens_as_token_ids(http: httpx.Client) -> None:
    choice = complete(http, max_tokens=4, **GREEDY)["choices"][0]
    assert all(t.startswith("token_id:") for t in choice["logprobs"]["tokens"])
    assert len(token_ids(choice)) == 4


def test_return_token_ids(http: httpx.Client) -> None:
    choice = complete(http, max_tokens=4, return_token_ids=True, **GREEDY)["choices"][0]
    assert choice["prompt_token_ids"] == ids_of(http, "Once upon a time")
    assert choice["token_ids"] == token_ids(choice)


def test_allowed_token_ids(http: httpx.Client) -> None:
    free = token_ids(complete(http, max_tokens=6, **GREEDY)["choices"][0])
    allowed = [t for t in range(300, 310) if t not in free]
    out = complete(http, max_tokens=6, allowed_token_ids=allowed, ignore_eos=True, **GREEDY)
    assert set(token_ids(out["choices"][0])) <= set(allowed)


def test_bad_words(http: httpx.Client) -> None:
    free = complete(http, max_tokens=8, **GREEDY)["choices"][0]
    word = next(w for w in free["text"].split() if w.isprintable())
    banned = {ids_of(http, word)[-1], ids_of(http, " " + word)[-1]}
    out = complete(http, max_tokens=8, bad_words=[word], **GREEDY)["choices"][0]
    assert not banned & set(token_ids(out)), (word, out["text"])


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_thinking_token_budget_without_a_reasoning_config_is_a_400(
    http: httpx.Client, path: str
) -> None:
    # This server has neither --reasoning-parser nor --reasoning-config (vLLM's words).
    body: dict[str, Any] = {"max_tokens": 2, "thinking_token_budget": 4}
    if path.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": "hi"}]
    else:
        body["prompt"] = "hi"
    r = http.post(path, json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert "reasoning_config is not configured" in err["message"]
    assert err["param"] == "thinking_token_budget"
    assert http.post(path, json={**body, "thinking_token_budget": -1}).status_code == 200
    bad = http.post(path, json={**body, "thinking_token_budget": -2})
    assert bad.status_code == 400 and "non-negative integer" in bad.text


def test_prompt_logprobs(http: httpx.Client) -> None:
    prompt_ids = ids_of(http, "Once upon a time")
    choice = complete(http, max_tokens=1, prompt_logprobs=2)["choices"][0]
    entries = choice["prompt_logprobs"]
    assert len(entries) == len(prompt_ids) and entries[0] is None
    for tid, entry in zip(prompt_ids[1:], entries[1:], strict=True):
        assert str(tid) in entry  # the prompt's own token, plus the top 2
        assert 1 <= len(entry) <= 3


def test_prompt_logprobs_on_chat(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model="actorllm-demo",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=1,
        extra_body={"prompt_logprobs": 0},
    )
    entries = (r.model_extra or {})["prompt_logprobs"]
    assert entries[0] is None and r.usage is not None
    assert len(entries) == r.usage.prompt_tokens


def test_truncate_prompt_tokens(http: httpx.Client) -> None:
    out = complete(http, prompt="one two three four five six seven", truncate_prompt_tokens=3)
    assert out["usage"]["prompt_tokens"] == 3


def test_min_tokens_holds_back_stop_tokens(http: httpx.Client) -> None:
    first = token_ids(complete(http, max_tokens=1, **GREEDY)["choices"][0])[0]
    stopped = complete(http, max_tokens=8, stop_token_ids=[first], **GREEDY)["choices"][0]
    assert stopped["finish_reason"] == "stop" and stopped["text"] == ""
    held = complete(http, max_tokens=8, stop_token_ids=[first], min_tokens=3, **GREEDY)
    assert len(token_ids(held["choices"][0])) >= 3


def test_skip_special_tokens(http: httpx.Client) -> None:
    special = ids_of(http, "<|im_start|>")
    assert len(special) == 1
    body = {"max_tokens": 2, "temperature": 0, "allowed_token_ids": special, "ignore_eos": True}
    assert complete(http, **body)["choices"][0]["text"] == ""
    shown = complete(http, skip_special_tokens=False, **body)["choices"][0]["text"]
    assert shown.count("<|im_start|>") == 2


def test_include_stop_str_in_output(http: httpx.Client) -> None:
    text = complete(http, max_tokens=12, temperature=0)["choices"][0]["text"]
    stop = next(text[i : i + 2] for i in range(2, len(text) - 2) if text[i : i + 2].strip())
    cut = complete(http, max_tokens=12, temperature=0, stop=[stop])["choices"][0]["text"]
    kept = complete(
        http, max_tokens=12, temperature=0, stop=[stop], include_stop_str_in_output=True
    )["choices"][0]["text"]
    assert kept == cut + stop


def test_repetition_penalty_reaches_the_sampler(http: httpx.Client) -> None:
    # A random model repeats itself under greedy decoding; a huge penalty forbids that.
    free = token_ids(complete(http, max_tokens=24, ignore_eos=True, **GREEDY)["choices"][0])
    assert len(set(free)) < len(free), "the demo model should repeat under greedy decoding"
    penalized = complete(http, max_tokens=24, ignore_eos=True, repetition_penalty=1e9, **GREEDY)[
        "choices"
    ][0]
    ids = token_ids(penalized)
    assert ids != free


def test_chat_echo_and_continue_final_message(client: openai.OpenAI) -> None:
    messages: Any = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello"},
    ]
    r = client.chat.completions.create(
        model="actorllm-demo",
        messages=messages,
        max_tokens=3,
        temperature=0,
        extra_body={"continue_final_message": True, "add_generation_prompt": False, "echo": True},
    )
    content = r.choices[0].message.content
    assert content is not None and content.startswith("Hello") and len(content) > len("Hello")
    stream = client.chat.completions.create(
        model="actorllm-demo",
        messages=messages,
        max_tokens=3,
        temperature=0,
        stream=True,
        extra_body={"continue_final_message": True, "add_generation_prompt": False, "echo": True},
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == content


def test_continue_final_message_renders_no_new_turn(http: httpx.Client) -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hel"}]
    cont = http.post(
        "/tokenize",
        json={"messages": messages, "continue_final_message": True, "add_generation_prompt": False},
    ).json()["tokens"]
    closed = http.post(
        "/tokenize", json={"messages": messages, "add_generation_prompt": False}
    ).json()["tokens"]
    assert closed[: len(cont)] == cont and len(closed) > len(cont)  # no <|im_end|> after "Hel"


def test_priority_is_refused_under_fcfs(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(
            model="actorllm-demo", prompt="x", max_tokens=1, extra_body={"priority": 3}
        )
    assert "priority" in str(info.value)


def test_context_length_is_checked(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="actorllm-demo", prompt="hello", max_tokens=MAX_LEN)
    assert f"maximum context length is {MAX_LEN} tokens" in str(info.value)
    r = client.chat.completions.create(
        model="actorllm-demo",
        messages=[{"role": "user", "content": "hi"}],
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert r.usage is not None  # max_tokens omitted: the room the prompt leaves
    assert r.usage.prompt_tokens + r.usage.completion_tokens == MAX_LEN


def test_unknown_field_is_ignored_with_a_warning(srv: ServeProcess, http: httpx.Client) -> None:
    complete(http, max_tokens=1, frobnicate_level=3)
    assert "ignoring unknown request fields: frobnicate_level" in srv.log()


def test_known_unsupported_field_is_refused(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="actorllm-demo",
            messages=[{"role": "user", "content": "hi"}],
            extra_body={"logits_processors": ["x"]},
        )
    assert info.value.body is not None
    assert info.value.body["param"] == "logits_processors"  # type: ignore[index]


def test_vllm_xargs_reach_the_engine(http: httpx.Client) -> None:
    # This server runs no custom logits processor: the engine refuses the arguments.
    r = http.post("/v1/completions", json={"prompt": "hi", "vllm_xargs": {"ban": 3}})
    assert r.status_code == 400, r.text
    assert "vllm_xargs" in r.json()["error"]["message"]


def test_beam_search_on_completions(http: httpx.Client) -> None:
    out = complete(
        http, n=3, use_beam_search=True, max_tokens=5, ignore_eos=True, logprobs=2,
        return_token_ids=True, temperature=0,
    )  # fmt: skip
    choices = out["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2]
    beams = [tuple(c["token_ids"]) for c in choices]
    assert len(set(beams)) == 3 and all(len(b) == 5 for b in beams)
    sums = [sum(c["logprobs"]["token_logprobs"]) for c in choices]
    assert sums == sorted(sums, reverse=True)  # best beam first
    assert out["usage"]["completion_tokens"] == 15
    # The best beam scores at least the greedy sequence (beam search explores more).
    greedy = complete(http, max_tokens=5, ignore_eos=True, logprobs=0, temperature=0)
    assert sums[0] >= sum(greedy["choices"][0]["logprobs"]["token_logprobs"]) - 1e-4


def test_beam_search_on_chat_streams_its_beams(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="actorllm-demo",
        messages=[{"role": "user", "content": "hi"}],
        n=2,
        max_tokens=4,
        stream=True,
        extra_body={"use_beam_search": True, "length_penalty": 0.5, "ignore_eos": True},
    )
    finished = {c.index: c.finish_reason for chunk in stream for c in chunk.choices}
    assert finished == {0: "length", 1: "length"}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"stop": ["x"]}, "stop"),
        ({"seed": 3}, "seed"),
        ({"top_p": 0.5}, "top_p"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"n": 16}, "n"),  # 32 logprobs a step, above --max-logprobs 30
        ({"echo": True, "logprobs": 1}, "echo"),
    ],
)
def test_beam_search_refuses_what_it_cannot_honour(
    http: httpx.Client, body: dict[str, Any], param: str
) -> None:
    r = http.post(
        "/v1/completions",
        json={"prompt": "hi", "use_beam_search": True, "max_tokens": 2, **body},
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.text


def test_engine_request_metrics_under_the_vllm_prefix(http: httpx.Client) -> None:
    before = http.get("/metrics").text
    complete(http, max_tokens=3, n=2, ignore_eos=True)
    text = http.get("/metrics").text
    labels = '{engine="0",model_name="actorllm-demo"}'

    def value(page: str, name: str) -> float:
        line = next((x for x in page.splitlines() if x.startswith(name + labels)), None)
        return 0.0 if line is None else float(line.rsplit(" ", 1)[1])

    assert (
        value(text, "vllm:generation_tokens_total") - value(before, "vllm:generation_tokens_total")
        == 6
    )
    phases = ("prefill", "decode", "inference")
    for hist in ("request_params_n", "time_per_output_token_seconds",
                 *(f"request_{p}_time_seconds" for p in phases)):  # fmt: skip
        name = f"vllm:{hist}_count"
        assert value(text, name) - value(before, name) == 1, hist
    assert "vllm:cache_config_info{" in text and "actorllm:" not in text


def test_cache_salt_separates_prefix_cache_tenants(http: httpx.Client) -> None:
    """Equal prompts share cached blocks only under the same salt (vLLM's cache_salt)."""
    prompt = "The salted prefix is long enough to fill a few blocks of sixteen tokens. " * 3

    def cached(salt: str | None) -> int:
        body: dict[str, Any] = {"prompt": prompt, "max_tokens": 1}
        if salt is not None:
            body["cache_salt"] = salt
        r = http.post("/v1/completions", json=body)
        assert r.status_code == 200, r.text
        return int(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])

    cached("tenant-a")  # fills the cache under tenant-a's salt
    assert cached("tenant-a") > 0
    assert cached("tenant-b") == 0  # same tokens, another salt: nothing shared
    assert cached(None) == 0  # nor with unsalted requests


def test_stream_interval_batches_tokens_into_each_chunk(http: httpx.Client) -> None:
    body = {
        "prompt": "Once upon a time",
        "max_tokens": 10,
        "ignore_eos": True,
        "temperature": 0,
        "return_token_ids": True,
        "stream": True,
        "stream_interval": 4,
    }
    sizes: list[int] = []
    text = ""
    with http.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    sizes.append(len(choice.get("token_ids") or []))
                    text += choice["text"]
    sizes = [s for s in sizes if s]
    assert sizes[0] == 1 and sum(sizes) == 10 and all(s >= 4 for s in sizes[1:-1]), sizes
    assert len(sizes) <= 4, sizes  # 1, 4, 4, 1 (fewer if a step's chunks were merged)
    whole = complete(http, max_tokens=10, ignore_eos=True, temperature=0)["choices"][0]["text"]
    assert text == whole


def test_max_logprobs_above_twenty(http: httpx.Client) -> None:
    out = complete(http, max_tokens=2, logprobs=25)
    assert all(len(top) >= 25 for top in out["choices"][0]["logprobs"]["top_logprobs"])
    r = http.post("/v1/completions", json={"prompt": "x", "max_tokens": 1, "logprobs": 31})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == (
        "Requested sample logprobs of 31, which is greater than max allowed: 30"
    )


def test_reasoning_effort_and_prompt_text_on_the_real_engine(http: httpx.Client) -> None:
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 2,
        "reasoning_effort": "low",
        "return_prompt_text": True,
        "seed": -1,
        "temperature": 1.0,
    }
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    assert "hi" in r.json()["prompt_text"]
