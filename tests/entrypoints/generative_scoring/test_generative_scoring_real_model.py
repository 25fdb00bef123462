"""``POST /generative_scoring`` on the real engine and the demo model: each score equals
the softmax of the model's own next-token logits, computed independently by transformers
on the same checkpoint (over the labels, and over the whole vocabulary)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import torch

from actorllm.demo.model import demo_model_path
from tests.entrypoints.conftest import real_server
from tests.entrypoints.server_thread import ServerThread

pytestmark = pytest.mark.slow

QUERY = "The capital of France is"
ITEMS = [" Paris.", " a city on the Seine", " not", "?"]
LABELS = [331, 17, 1024, 4095]


@pytest.fixture(scope="module")
def srv() -> Iterator[ServerThread]:
    with real_server(str(demo_model_path()), dtype="float32", max_model_len=128) as server:
        yield server


def next_token_logprobs(prompts: list[list[int]]) -> list[torch.Tensor]:
    """transformers' log-softmax over the vocabulary after each prompt: [V] each."""
    import transformers

    path = demo_model_path()
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        return [hf(torch.tensor([p])).logits[0, -1].log_softmax(-1) for p in prompts]


@pytest.mark.parametrize("item_first", [False, True])
def test_scores_are_the_models_own_probabilities(srv: ServerThread, item_first: bool) -> None:
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(demo_model_path())
    query = tok.encode(QUERY)
    items = [tok.encode(t, add_special_tokens=False) for t in ITEMS]
    prompts = [i + query if item_first else query + i for i in items]
    reference = next_token_logprobs(prompts)
    labels = torch.tensor(LABELS)
    for apply_softmax in (True, False):
        sent = {"query": QUERY, "items": ITEMS, "label_token_ids": LABELS,
                "apply_softmax": apply_softmax, "item_first": item_first}  # fmt: skip
        r = httpx.post(srv.url + "/generative_scoring", json=sent, timeout=60)
        assert r.status_code == 200, r.text
        got = [d["score"] for d in r.json()["data"]]
        want = [
            (lp[labels].softmax(-1)[0] if apply_softmax else lp[LABELS[0]].exp()).item()
            for lp in reference
        ]
        assert got == pytest.approx(want, rel=1e-3, abs=1e-6), (apply_softmax, got, want)
        usage = r.json()["usage"]
        assert usage["prompt_tokens"] == sum(map(len, prompts))
        assert usage["completion_tokens"] == len(ITEMS)


def test_token_ids_score_as_their_text(srv: ServerThread) -> None:
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(demo_model_path())
    as_text = {"query": QUERY, "items": ITEMS[:2], "label_token_ids": LABELS}
    as_ids = {
        "query": tok.encode(QUERY),
        "items": [tok.encode(t, add_special_tokens=False) for t in ITEMS[:2]],
        "label_token_ids": LABELS,
    }
    a, b = (
        httpx.post(srv.url + "/generative_scoring", json=x, timeout=60) for x in (as_text, as_ids)
    )
    assert a.status_code == b.status_code == 200
    assert [d["score"] for d in a.json()["data"]] == pytest.approx(
        [d["score"] for d in b.json()["data"]], rel=1e-5
    )


def test_labels_past_the_model_vocabulary(srv: ServerThread) -> None:
    sent = {"query": QUERY, "items": ["x"], "label_token_ids": [1, 4096]}
    r = httpx.post(srv.url + "/generative_scoring", json=sent, timeout=60)
    assert r.status_code == 400
    assert r.json()["error"]["message"] == (
        "label_token_id 4096 is out of vocabulary range [0, 4096). Please provide valid token IDs."
    )
