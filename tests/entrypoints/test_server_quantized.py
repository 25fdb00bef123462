"""A GPTQ checkpoint served over HTTP answers with the tokens of its dequantized reference."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from actorllm.demo import demo_tokenizer_path
from tests.entrypoints.conftest import real_server
from tests.entrypoints.server_thread import ServerThread
from tests.helpers.quant_checkpoints import write_quantized

PROMPTS = [[5, 17, 300, 42], [9, 8, 7]]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    ref, quant = write_quantized(
        tmp_path_factory.mktemp("gptq-http"), "gptq", bits=4, desc_act=True,
        vocab_size=4096, eos_token_id=0,
    )  # fmt: skip
    for f in demo_tokenizer_path().iterdir():
        shutil.copy(f, quant / f.name)
    return ref, quant


@pytest.fixture(scope="module")
def server(checkpoints: tuple[Path, Path]) -> Iterator[ServerThread]:
    with real_server(
        str(checkpoints[1]), max_model_len=64, kv_cache_memory_bytes=4 * 2**20,
        quantization="gptq", dtype="float32",
    ) as srv:  # fmt: skip
        yield srv


def test_gptq_over_http_matches_the_reference(
    server: ServerThread, checkpoints: tuple[Path, Path]
) -> None:
    from actorllm.core.sampling_params import SamplingParams
    from actorllm.worker.model_runner import ModelRunner
    from tests.helpers.sched_driver import SchedDriver

    runner = ModelRunner(checkpoints[0], dtype="float32", block_size=4, max_model_len=64)
    runner.load_model()
    runner.initialize_kv_cache(num_blocks=64)
    driver = SchedDriver(runner, token_budget=64)
    greedy = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    for i, prompt in enumerate(PROMPTS):
        driver.add(str(i), prompt, greedy)
    driver.run()
    with openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0) as client:
        model = client.models.list().data[0].id
        for i, prompt in enumerate(PROMPTS):
            r = client.completions.create(
                model=model, prompt=prompt, max_tokens=6, temperature=0,
                extra_body={"ignore_eos": True, "return_token_ids": True},
            )  # fmt: skip
            got = r.choices[0].model_extra.get("token_ids")  # type: ignore[union-attr]
            assert got == driver.reqs[str(i)].outputs
