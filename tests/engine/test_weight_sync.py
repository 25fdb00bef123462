"""Weight transfer from a trainer (RLHF) end to end on a tiny model: vLLM's calls through
``LLM``, the gloo backend, atomic updates (a bad tensor or a dead trainer leaves the old
weights serving), and a swap under load with every token's version recorded."""

from __future__ import annotations

import multiprocessing
import threading
from typing import Any

import anyio
import pytest
import torch
from safetensors.torch import load_file

from actorllm import LLM, SamplingParams
from actorllm.core.errors import InvalidRequestError
from actorllm.core.outputs import WeightVersionSpan
from actorllm.distributed.weight_transfer import (
    BroadcastUpdateInfo,
    GlooTrainerInitInfo,
    LLMWeightSyncClient,
    StateDictSource,
    TransferGroup,
    WeightTransferTrainerFactory,
)
from actorllm.engine import AsyncEngine
from actorllm.worker.weight_receiver import WeightBroadcastError, WeightTransferError
from tests.helpers.trainers import AsyncEngineClient, dying_trainer, free_port

GREEDY = SamplingParams(temperature=0.0, max_tokens=8)
SMALL = dict(max_model_len=256, kv_cache_memory_bytes=8 * 2**20)
PROMPTS = ["The quick brown fox", "Once upon a time", "def main():"]


def greedy(llm: LLM) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in llm.generate(PROMPTS, GREEDY, use_tqdm=False)]


def join(llm: LLM, tensors: dict[str, torch.Tensor], timeout_s: float = 30.0) -> Any:
    info = GlooTrainerInitInfo(
        master_address="127.0.0.1",
        master_port=free_port(),
        world_size=1 + llm.get_world_size(),
        timeout_s=timeout_s,
    )
    return WeightTransferTrainerFactory.trainer_init(
        info, client=LLMWeightSyncClient(llm), source=StateDictSource(tensors)
    )


@pytest.fixture(scope="module")
def want(other_model) -> list[list[int]]:
    with LLM(other_model, **SMALL) as reference:
        return greedy(reference)


@pytest.fixture(scope="module")
def new_weights(other_model) -> dict[str, torch.Tensor]:
    return load_file(f"{other_model}/model.safetensors")


@pytest.fixture(scope="module")
def llm(tiny_model):
    with LLM(tiny_model, weight_transfer_config={"backend": "gloo"}, **SMALL) as llm:
        yield llm


@pytest.fixture
def fresh(llm, tiny_model):
    """The module's engine with its own weights back (a test may have changed them)."""
    trainer = join(llm, load_file(f"{tiny_model}/model.safetensors"))
    trainer.send_weights(weight_version="default")
    trainer.shutdown()
    return llm


def test_round_trip_serves_the_trainers_weights_and_labels_tokens(fresh, want, new_weights):
    llm = fresh
    before = greedy(llm)
    assert before != want
    trainer = join(llm, new_weights)
    trainer.send_weights(weight_version="step-1")
    out = llm.generate(PROMPTS[0], GREEDY, use_tqdm=False)[0].outputs[0]
    assert greedy(llm) == want
    assert llm.get_weight_version() == "step-1"
    assert out.weight_versions == [WeightVersionSpan("step-1", 0, len(out.token_ids))]
    assert out.token_weight_versions == ["step-1"] * len(out.token_ids)
    # vLLM's lower-level calls: only the label changes.
    llm.update_weight_version("step-1b")
    assert llm.get_weight_version() == "step-1b"
    trainer.shutdown()


def test_refused_without_a_weight_transfer_config(tiny_model):
    with LLM(tiny_model, **SMALL) as plain:
        with pytest.raises(InvalidRequestError, match="Weight transfer not configured"):
            plain.init_weight_transfer_engine({"init_info": {}})
        with pytest.raises(InvalidRequestError, match="weight_transfer_config"):
            plain.start_weight_update()


def test_calls_out_of_order_are_refused_by_name(fresh):
    llm = fresh
    trainer = join(llm, {})
    with pytest.raises(RuntimeError, match="start_weight_update must be called before"):
        llm.update_weights({"update_info": {"names": [], "dtype_names": [], "shapes": []}})
    with pytest.raises(RuntimeError, match="without a matching start_weight_update"):
        llm.finish_weight_update()
    with pytest.raises(ValueError, match="dtype_names"):
        llm.start_weight_update()
        llm.update_weights({"update_info": {"names": ["x"], "dtype_names": [], "shapes": []}})
    trainer.shutdown()


@pytest.mark.parametrize(
    ("name", "bad", "message"),
    [
        ("model.no_such.weight", torch.zeros(4), "model.no_such.weight: the model has no such"),
        ("model.norm.weight", torch.zeros(7), "model.norm.weight: checkpoint shape"),
        ("model.norm.weight", torch.zeros(64, dtype=torch.int32), "model.norm.weight: a torch.int"),
    ],
)
def test_a_tensor_that_does_not_fit_fails_the_update_and_the_old_weights_serve(
    fresh, new_weights, want, name, bad, message
):
    llm = fresh
    before = greedy(llm)
    tensors = dict(new_weights)
    tensors[name] = bad  # among good tensors: nothing of the update may be applied
    trainer = join(llm, tensors)
    with pytest.raises(WeightTransferError, match=message):
        trainer.send_weights(weight_version="bad")
    assert greedy(llm) == before
    assert llm.get_weight_version() == "default"
    # The whole broadcast was received (drained): the same group carries the next update.
    trainer.source = StateDictSource(new_weights)
    trainer.send_weights(weight_version="good")
    assert greedy(llm) == want
    trainer.shutdown()


def test_a_trainer_killed_mid_broadcast_leaves_the_old_weights_serving(fresh, new_weights, want):
    llm = fresh
    before = greedy(llm)
    port, world = free_port(), 1 + llm.get_world_size()
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(target=dying_trainer, args=(port, world, new_weights, 5))
    proc.start()
    init = {"master_address": "127.0.0.1", "master_port": port, "world_size": world,
            "timeout_s": 20}  # fmt: skip
    llm.init_weight_transfer_engine({"init_info": init})
    llm.start_weight_update()
    info = BroadcastUpdateInfo.of(StateDictSource(new_weights).metadata())
    with pytest.raises(WeightBroadcastError, match=r"tensor 6 of \d+\) failed"):
        llm.update_weights({"update_info": vars(info)})
    proc.join(10)
    assert greedy(llm) == before  # the old weights, whole
    assert llm.get_weight_version() == "default"
    with pytest.raises(RuntimeError, match="not initialized"):
        llm.start_weight_update()  # the broken group was dropped
    trainer = join(llm, new_weights)  # a new trainer joins; updates work again
    trainer.send_weights(weight_version="after")
    assert greedy(llm) == want
    trainer.shutdown()


# -- swap under load ------------------------------------------------------------------------

STREAMS = 64
LOAD = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)


@pytest.mark.anyio
async def test_swap_under_load_loses_nothing_and_labels_every_token(tiny_model, new_weights):
    finals: dict[int, Any] = {}
    seen = [0]  # outputs received so far, all streams
    async with (
        AsyncEngine.open(
            tiny_model, weight_transfer_backend="gloo", max_num_seqs=STREAMS, **SMALL
        ) as engine,
        anyio.from_thread.BlockingPortal() as portal,
    ):

        async def stream(i: int) -> None:
            async for out in engine.generate(f"request {i} says", LOAD):  # CUMULATIVE
                seen[0] += 1
                finals[i] = out

        def push() -> None:  # the trainer, on its own thread
            trainer = WeightTransferTrainerFactory.trainer_init(
                GlooTrainerInitInfo(
                    master_address="127.0.0.1", master_port=free_port(), world_size=2
                ),
                client=AsyncEngineClient(engine, portal),
                source=StateDictSource(new_weights),
            )
            trainer.send_weights(weight_version="v1")
            trainer.shutdown()

        started = [0]
        pushed = anyio.Event()

        def launch(tg: anyio.abc.TaskGroup) -> None:
            tg.start_soon(stream, started[0])
            started[0] += 1

        async def keep_streaming(tg: anyio.abc.TaskGroup) -> None:
            # New streams keep starting until the swap has landed, so some straddle it
            # however fast the host runs the first ones to their end.
            while not pushed.is_set():
                launch(tg)
                await anyio.sleep(0.02)

        async with anyio.create_task_group() as tg:
            for _ in range(STREAMS):
                launch(tg)
            while seen[0] < STREAMS * 3:  # every stream is under way
                await anyio.sleep(0.01)
            tg.start_soon(keep_streaming, tg)
            await anyio.to_thread.run_sync(push)
            pushed.set()
        assert await engine.get_weight_version() == "v1"
    assert len(finals) == started[0]  # none lost
    mixed = 0
    for out in finals.values():
        c = out.outputs[0]
        assert out.finished and len(c.token_ids) == LOAD.max_tokens
        versions = c.token_weight_versions
        assert len(versions) == len(c.token_ids)
        assert versions == sorted(versions, key=["default", "v1"].index)  # monotone
        spans = c.weight_versions
        assert [s.version for s in spans] == list(dict.fromkeys(versions))
        assert spans[0].start == 0 and spans[-1].end == len(c.token_ids)
        mixed += len(spans) == 2
    assert mixed > 0  # the swap landed while streams ran


def test_the_trainer_helper_needs_no_engine_internals():
    """A training script imports the trainer side only (and torch)."""
    code = (
        "import sys, actorllm.distributed.weight_transfer as wt; "
        "assert not [m for m in sys.modules if m.startswith(('actorllm.engine', "
        "'actorllm.worker', 'actorllm.compat'))], sorted(sys.modules); print(wt.__all__[0])"
    )
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_transfer_group_is_its_own_and_can_be_made_again():
    port = free_port()
    got: list[torch.Tensor] = []

    def receiver() -> None:
        g = TransferGroup.open("gloo", "127.0.0.1", port, 1, 2, timeout_s=20)
        buf = torch.empty(3, dtype=torch.bfloat16)
        g.broadcast(buf)
        got.append(buf)
        g.close()

    t = threading.Thread(target=receiver)
    t.start()
    g = TransferGroup.open("gloo", "127.0.0.1", port, 0, 2, timeout_s=20)
    g.broadcast(torch.tensor([1.0, 2.0, 3.0], dtype=torch.bfloat16))
    t.join(20)
    g.close()
    assert got[0].tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="not one of gloo, nccl"):
        TransferGroup.open("ipc", "127.0.0.1", port, 0, 2)


def test_tensor_parallel_ranks_each_take_their_shards(tiny_model, new_weights, want):
    """TP=2 (mp): both ranks receive every tensor by broadcast and keep their slices of
    q/k/v, gate/up, o/down and the vocabulary; greedy output is the new weights'."""
    with LLM(
        tiny_model, tensor_parallel_size=2, weight_transfer_config={"backend": "gloo"}, **SMALL
    ) as llm:
        assert llm.get_world_size() == 2
        before = greedy(llm)
        trainer = join(llm, new_weights)
        tensors = dict(new_weights)
        tensors["model.layers.0.self_attn.q_proj.weight"] = torch.zeros(3, 3)
        trainer.source = StateDictSource(tensors)
        with pytest.raises(WeightTransferError, match=r"q_proj\.weight: (checkpoint )?shape"):
            trainer.send_weights(weight_version="bad")
        assert greedy(llm) == before
        trainer.source = StateDictSource(new_weights)
        trainer.send_weights(weight_version="tp")
        assert greedy(llm) == want
        trainer.shutdown()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_nccl_without_cuda_is_refused_by_name():
    with pytest.raises(ValueError, match="'nccl' needs CUDA; use 'gloo' on CPU"):
        TransferGroup.open("nccl", "127.0.0.1", free_port(), 0, 2)
