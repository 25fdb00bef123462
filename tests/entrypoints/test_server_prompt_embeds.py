"""``prompt_embeds`` on ``/v1/completions`` (``--enable-prompt-embeds``), with the ``openai``
client as vLLM's docs send it: base64 of ``torch.save(tensor)`` in ``extra_body``. The
tokens equal those of the same prompt as token ids; several embeddings (and text after them)
are one choice each; bad payloads and what vLLM refuses beside them are 400s naming the
field; chat has no such field."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator

import openai
import pytest
import torch
import transformers

from tests.engine.conftest import _tiny_llama
from tests.entrypoints.conftest import real_server
from tests.entrypoints.server_thread import ServerThread

IDS = [11, 42, 97, 300, 5, 6, 7]
MAX_TOKENS = 5


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _tiny_llama(tmp_path_factory.mktemp("tiny-llama"), seed=0)


ENGINE = dict(served_model_name="m", max_model_len=128, kv_cache_memory_bytes=2 * 2**20)


@pytest.fixture(scope="module")
def server(model: str) -> Iterator[ServerThread]:
    with real_server(model, dtype="float32", enable_prompt_embeds=True, **ENGINE) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: ServerThread) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0) as c:
        yield c


def _b64(tensor: torch.Tensor) -> str:
    buf = io.BytesIO()
    torch.save(tensor, buf)
    return base64.b64encode(buf.getvalue()).decode()


@pytest.fixture(scope="module")
def embeds(model: str) -> torch.Tensor:
    hf = transformers.AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    with torch.no_grad():
        return hf.get_input_embeddings()(torch.tensor(IDS)).clone()  # [T, H]


def _greedy(client: openai.OpenAI, **body: object) -> openai.types.Completion:
    extra = {k: body.pop(k) for k in list(body) if k in ("prompt_embeds",)}
    return client.completions.create(
        model="m", max_tokens=MAX_TOKENS, temperature=0.0, extra_body=extra, **body
    )


def test_embeddings_complete_like_their_tokens(client, embeds):
    by_ids = _greedy(client, prompt=IDS)
    by_embeds = _greedy(client, prompt="", prompt_embeds=_b64(embeds))
    assert by_embeds.choices[0].text == by_ids.choices[0].text
    assert by_embeds.usage.prompt_tokens == len(IDS)
    bf16 = _greedy(client, prompt="", prompt_embeds=_b64(embeds.to(torch.bfloat16)[None]))
    assert len(bf16.choices[0].text) > 0  # [1, T, H] in bfloat16: squeezed and cast


def test_several_embeddings_then_text_are_one_choice_each(client, embeds):
    out = _greedy(client, prompt="hello", prompt_embeds=[_b64(embeds), _b64(embeds[:3])])
    assert [c.index for c in out.choices] == [0, 1, 2]
    assert out.choices[0].text == _greedy(client, prompt=IDS).choices[0].text
    assert out.choices[2].text == _greedy(client, prompt="hello").choices[0].text


def test_streamed(client, embeds):
    stream = client.completions.create(
        model="m", prompt="", max_tokens=MAX_TOKENS, temperature=0.0, stream=True,
        extra_body={"prompt_embeds": _b64(embeds)},
    )  # fmt: skip
    text = "".join(c.choices[0].text for c in stream if c.choices)
    assert text == _greedy(client, prompt=IDS).choices[0].text


@pytest.mark.parametrize(
    ("body", "param", "match"),
    [
        ({"prompt_embeds": "not base64!"}, "prompt_embeds", "not valid base64"),
        ({"prompt_embeds": base64.b64encode(b"junk").decode()}, "prompt_embeds", "deserialized"),
        ({"prompt_embeds": "E"}, "prompt_embeds", None),
        ({"echo": True}, "echo", "Echo is unsupported with prompt embeds."),
        ({"prompt_logprobs": 1}, "prompt_logprobs", "not compatible with prompt embeds"),
        ({"truncate_prompt_tokens": 3}, "truncate_prompt_tokens", "not supported"),
        ({"use_beam_search": True}, "prompt_embeds", "beam search does not take prompt_embeds"),
    ],
)
def test_bad_requests_name_the_field(client, embeds, body, param, match):
    body = {"prompt_embeds": _b64(embeds), **body}
    if body["prompt_embeds"] == "E":
        body["prompt_embeds"] = _b64(torch.zeros(2, 5))  # the wrong hidden size
        match = "hidden_size 5 does not match"
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="m", prompt="", max_tokens=2, extra_body=body)
    assert err.value.status_code == 400
    assert err.value.body["param"] == param  # type: ignore[index]
    assert match in err.value.body["message"]  # type: ignore[index]


def test_chat_has_no_prompt_embeds(client, embeds):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
            extra_body={"prompt_embeds": _b64(embeds)},
        )  # fmt: skip
    assert err.value.body["param"] == "prompt_embeds"  # type: ignore[index]


def test_a_server_without_the_flag_names_it(model, embeds):
    with (
        real_server(model, **ENGINE) as srv,
        openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0) as c,
    ):
        with pytest.raises(openai.BadRequestError, match="--enable-prompt-embeds"):
            _greedy(c, prompt="", prompt_embeds=_b64(embeds))
        with pytest.raises(openai.BadRequestError, match="--enable-prompt-embeds") as err:
            _chat(c, [_user({"type": "prompt_embeds", "data": _b64(embeds)})])
        assert err.value.body["param"] == "prompt_embeds"  # type: ignore[index]
        # Without the flag the placeholder is plain text.
        assert _chat(c, [{"role": "user", "content": "<prompt_embeds>"}]).choices


# -- chat: prompt_embeds content parts (vLLM 0.32) -----------------------------------------


def _user(*parts: dict) -> dict:
    return {"role": "user", "content": list(parts)}


def _chat(client: openai.OpenAI, messages: list, **body: object):
    return client.chat.completions.create(
        model="m", messages=messages, max_tokens=MAX_TOKENS, temperature=0.0, **body
    )


@pytest.fixture(scope="module")
def text_and_embeds(model: str) -> tuple[str, str]:
    """A text and the rows of its tokens (no special tokens), base64."""
    tok = transformers.AutoTokenizer.from_pretrained(model)
    text = "Hello, my name is"
    ids = tok(text, add_special_tokens=False).input_ids
    hf = transformers.AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    with torch.no_grad():
        return text, _b64(hf.get_input_embeddings()(torch.tensor(ids)).clone())


def test_a_part_of_the_texts_rows_answers_as_the_text(client, text_and_embeds, embeds):
    text, b64 = text_and_embeds
    by_text = _chat(client, [{"role": "user", "content": text}])
    by_rows = _chat(client, [_user({"type": "prompt_embeds", "data": b64})])
    assert by_rows.choices[0].message.content == by_text.choices[0].message.content
    assert by_rows.usage.prompt_tokens == by_text.usage.prompt_tokens
    other = _chat(client, [_user({"type": "prompt_embeds", "data": _b64(embeds)})])
    assert other.choices[0].message.content != by_text.choices[0].message.content  # rows count


def test_parts_mixed_with_text_across_messages(client, text_and_embeds, embeds):
    text, b64 = text_and_embeds
    part = {"type": "prompt_embeds", "data": b64}
    one = _chat(client, [_user(part, {"type": "text", "text": "Continue:"})])
    assert one.choices[0].message.content
    # Parts are joined with newlines, as text parts are: rows where the text would be.
    two = _chat(client, [_user(part, {"type": "text", "text": " and "}, part)])
    same = _chat(client, [{"role": "user", "content": f"{text}\n and \n{text}"}])
    assert two.choices[0].message.content == same.choices[0].message.content
    assert two.usage.prompt_tokens == same.usage.prompt_tokens
    conversation = [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}, part]},
        _user({"type": "prompt_embeds", "data": _b64(embeds)}, {"type": "text", "text": "Sum up."}),
    ]
    many = _chat(client, conversation, extra_body={"return_token_ids": True})
    assert many.choices[0].message.content
    assert many.prompt_token_ids.count(0) >= len(IDS)  # placeholders of the rows


def test_streamed_as_answered(client, text_and_embeds):
    _, b64 = text_and_embeds
    messages = [_user({"type": "prompt_embeds", "data": b64}, {"type": "text", "text": "Go:"})]
    whole = _chat(client, messages).choices[0].message.content
    chunks = _chat(client, messages, stream=True)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == whole


@pytest.mark.parametrize(
    ("content", "param", "match"),
    [
        ([{"type": "prompt_embeds"}], "prompt_embeds", "requires a non-empty `data`"),
        ([{"type": "prompt_embeds", "data": ""}], "prompt_embeds", "requires a non-empty `data`"),
        ([{"type": "prompt_embeds", "data": "not_valid_base64!!"}], "prompt_embeds",
         "not valid base64"),
        ([{"type": "prompt_embeds", "data": "E"}], "prompt_embeds", "hidden_size 5 does not"),
        ([{"type": "text", "text": "a <prompt_embeds> b"}], "messages", "reserved placeholder"),
        ("a <prompt_embeds> b", "messages", "reserved placeholder"),
        ([{"type": "image_url", "image_url": {"url": "x"}}], None, "image_url"),
    ],
)  # fmt: skip
def test_bad_parts_are_400s_naming_the_field(client, content, param, match):
    if isinstance(content, list) and content[0].get("data") == "E":
        content = [{"type": "prompt_embeds", "data": _b64(torch.zeros(2, 5))}]
    with pytest.raises(openai.BadRequestError) as err:
        _chat(client, [{"role": "user", "content": content}])
    assert match in err.value.body["message"]  # type: ignore[index]
    if param is not None:
        assert err.value.body["param"] == param  # type: ignore[index]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"truncate_prompt_tokens": 4}, "truncate_prompt_tokens"),
        ({"use_beam_search": True, "n": 2}, "prompt_embeds"),
        ({"prompt_logprobs": 1}, "prompt_logprobs"),
    ],
)
def test_what_parts_cannot_have_is_refused(client, embeds, body, param):
    messages = [_user({"type": "prompt_embeds", "data": _b64(embeds)})]
    with pytest.raises(openai.BadRequestError) as err:
        _chat(client, messages, extra_body=body)
    assert err.value.body["param"] == param  # type: ignore[index]


def test_other_endpoints_refuse_parts(server, embeds):
    messages = [_user({"type": "prompt_embeds", "data": _b64(embeds)})]
    with server.client() as c:
        r = c.post("/tokenize", json={"model": "m", "messages": messages})
    assert r.status_code == 400
    assert "/v1/chat/completions only" in r.json()["error"]["message"]
