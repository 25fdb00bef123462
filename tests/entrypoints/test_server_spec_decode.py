"""Speculative decoding over HTTP with the openai client: the completions equal the
engine's without speculation, logprobs come for every accepted token, and /metrics
carries the spec_decode counters."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import openai
import pytest

from actorllm.core.sampling_params import SamplingParams
from actorllm.engine import AsyncEngine
from actorllm.entrypoints.openai.app import AppSettings, build_app
from tests.entrypoints.server_thread import ServerThread
from tests.helpers.spec_model import PROMPT_IDS, SPEC, small_vocab_llama

# float32: "auto" would run bf16 on a host with native bf16, where this random model's greedy
# output need not loop, and the n-gram drafts this test counts would not be accepted.
KW: dict[str, Any] = {"max_model_len": 256, "kv_cache_memory_bytes": 4 * 2**20, "dtype": "float32"}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return small_vocab_llama(Path(tmp_path_factory.mktemp("spec-http")))


@pytest.fixture(scope="module")
def server(model: str) -> Iterator[ServerThread]:
    app = build_app(
        lambda: AsyncEngine.open(model, speculative_config=SPEC, **KW),
        AppSettings(log_interval_s=0),
    )
    srv = ServerThread(app).start(timeout_s=240)
    yield srv
    srv.stop()
    assert srv.error is None


def _reference(model: str) -> list[list[int]]:
    async def main() -> list[list[int]]:
        params = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)
        out = []
        async with AsyncEngine.open(model, **KW) as eng:
            for ids in PROMPT_IDS:
                async for o in eng.generate({"prompt_token_ids": ids}, params):
                    last = o
                out.append(last.outputs[0].token_ids)
        return out

    return anyio.run(main, backend="trio")


def test_openai_client_with_ngram_speculation(server: ServerThread, model: str) -> None:
    want = _reference(model)
    with openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0) as client:
        name = client.models.list().data[0].id
        got = []
        for ids in PROMPT_IDS:
            r = client.completions.create(
                model=name, prompt=ids, max_tokens=20, temperature=0, logprobs=1,
                extra_body={"ignore_eos": True, "return_token_ids": True},
            )  # fmt: skip
            choice = r.choices[0]
            lp = choice.logprobs
            assert lp is not None and lp.token_logprobs is not None
            assert len(lp.token_logprobs) == 20 and r.usage and r.usage.completion_tokens == 20
            got.append(choice.model_extra["token_ids"])  # type: ignore[index]
    assert got == want
    metrics = server.client().get("/metrics").text
    counts = {}
    for line in metrics.splitlines():
        for key in ("num_draft_tokens", "num_accepted_tokens", "num_drafts"):
            if line.startswith(f"actorllm:spec_decode_{key}_total{{"):
                counts[key] = float(line.rsplit(" ", 1)[1])
    assert counts["num_drafts"] > 0
    assert 0 < counts["num_accepted_tokens"] <= counts["num_draft_tokens"]
    assert "actorllm:spec_decode_num_accepted_tokens_per_pos_total{" in metrics
