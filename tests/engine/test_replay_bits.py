"""A crash changes nothing on a bf16 model: a request replayed after a crash prefills its
prompt and its outputs again in one step, and each of those rows computes the bits its
first run did (attention plans rows by position, kernels/attention.py), so greedy and
seeded requests continue with the tokens they would have produced, prompts past the
128-token position (bf16 P.V) included."""

import random
import shutil

import anyio
import pytest
import torch
from torch import nn

from actorllm.core.sampling_params import SamplingParams
from actorllm.demo import demo_tokenizer_path
from actorllm.engine import AsyncEngine
from actorllm.kernels import paged_decode as native_decode
from actorllm.kernels.cpu_features import amx_bf16
from actorllm.models.onednn_linear import prepack_linears
from actorllm.testing import inject_fault
from actorllm.testing.engine_harness import check_invariants
from tests.helpers.models import make_tiny_checkpoint

pytestmark = pytest.mark.anyio

HIDDEN, INTER = 128, 256
_rng = random.Random(0)
PROMPTS = [[_rng.randrange(1, 512) for _ in range(n)] for n in (40, 150, 200, 300)]
PARAMS = [
    SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True),
    SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True),
    SamplingParams(temperature=1.0, seed=7, max_tokens=24, ignore_eos=True),
    SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True),
]


@pytest.fixture(scope="module")
def anyio_backend():
    return "trio"


def _linears_batch_invariant() -> bool:
    """Whether this host's bf16 linears (at the model's shapes) give a row the same bits at
    1 row and among many: the few-rows kernels and oneDNN sum in orders that differ from
    K = 1024 on (docs/architecture.md, "Replays"), and on some hosts below it too."""
    torch.manual_seed(0)
    for k, n in ((HIDDEN, 2 * INTER), (INTER, HIDDEN), (HIDDEN, 512)):
        model = nn.Sequential(nn.Linear(k, n, bias=False)).bfloat16()
        prepack_linears(model)
        x = torch.randn(96, k).bfloat16()
        with torch.no_grad():
            if not torch.equal(model(x[:2]), model(x)[:2]):
                return False
    return True


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    if not native_decode.supports(torch.empty(1, 1, 1, 1)):
        pytest.skip("without the native decode kernel rows are planned by query counts")
    if amx_bf16():
        pytest.skip("AMX hosts: tile kernels not matched for replays (docs/architecture.md §3)")
    if not _linears_batch_invariant():
        pytest.skip("this host's bf16 linears are not batch invariant at these shapes")
    path = make_tiny_checkpoint(
        tmp_path_factory.mktemp("bf16-llama"), "llama", vocab_size=512, eos_token_id=0,
        max_position_embeddings=1024, hidden_size=HIDDEN, intermediate_size=INTER,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_hidden_layers=2,
        dtype=torch.bfloat16,
    )  # fmt: skip
    for f in demo_tokenizer_path().iterdir():
        shutil.copy(f, path / f.name)
    return str(path)


def engine(model_dir: str):
    return AsyncEngine.open(
        model_dir, dtype="bfloat16", max_model_len=512, kv_cache_memory_bytes=16 * 2**20,
        max_num_batched_tokens=256,
    )  # fmt: skip


async def run_all(eng) -> list[list[int]]:
    outs: dict[int, list[int]] = {}

    async def one(i: int) -> None:
        last = None
        async for out in eng.generate({"prompt_token_ids": PROMPTS[i]}, PARAMS[i]):
            last = out
        outs[i] = last.outputs[0].token_ids

    async with anyio.create_task_group() as tg:
        for i in range(len(PROMPTS)):
            tg.start_soon(one, i)
    return [outs[i] for i in range(len(PROMPTS))]


@pytest.fixture(scope="module")
async def reference(model_dir):
    async with engine(model_dir) as eng:
        return await run_all(eng)


@pytest.mark.parametrize(("actor", "step"), [("worker", 6), ("worker", 14), ("scheduler", 10)])
async def test_a_crash_changes_nothing_in_bf16(model_dir, reference, actor, step):
    async with engine(model_dir) as eng:
        inject_fault(eng, actor, at_step=step)
        assert await run_all(eng) == reference
        stats = await eng.get_stats()
        assert stats.actor_restarts["executor" if actor == "worker" else actor] >= 1
        await check_invariants(eng)
