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
        pytest.raises(openai.BadRequestError, match="--enable-prompt-embeds"),
    ):
        _greedy(c, prompt="", prompt_embeds=_b64(embeds))


def test_the_openapi_document_states_the_field(server):
    with server.client() as c:
        doc = c.get("/openapi.json").json()
    schema = doc["components"]["schemas"]["CompletionRequest"]
    assert [b["required"] for b in schema["anyOf"]] == [["prompt"], ["prompt_embeds"]]
    assert schema["properties"]["prompt_embeds"]["anyOf"][0]["contentEncoding"] == "base64"
