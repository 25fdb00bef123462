"""Pipeline parallel over gloo on CPU (models/pipeline.py, distributed/pipe.py): ``-pp 2``
and ``-pp 3`` give the single worker's greedy tokens (even and uneven splits, tied heads,
dense and MoE, quantized checkpoints and GGUF files too), each stage holds the KV cache
and the weights of its layers only, the hidden states crossing stages are counted, a
stage killed (or hung) mid-batch is replaced with no request lost; the Ray backend (every
stage a Ray actor, gloo bound to the node's address); what PP is not built with is refused
by name.

Each ``-pp 2`` engine spawns one rank process: the tests share engines where they can."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from actorllm import LLM, SamplingParams
from actorllm.demo import demo_tokenizer_path
from actorllm.distributed.ray_connect import connect
from actorllm.engine import AsyncEngine
from actorllm.engine.config.engine_config import EngineConfig, EngineConfigError
from actorllm.models.pipeline import PARTITION_ENV
from tests.distributed.test_tensor_parallel import (
    ENGINE,
    PROMPTS,
    _batch,
    _group,
    _prompt_logprobs,
)
from tests.distributed.test_tp_dp import _batch_killing
from tests.helpers.gguf_checkpoints import write_gguf
from tests.helpers.models import Family, make_tiny_checkpoint
from tests.helpers.quant_checkpoints import write_quantized
from tests.helpers.ray_cluster import LocalRayCluster
from tests.helpers.ray_ranks import kv_layers, weight_bytes

PARAMS = SamplingParams(
    max_tokens=10, temperature=0.0, ignore_eos=True, logprobs=2, prompt_logprobs=1
)
GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)


def _checkpoint(directory: Path, family: Family, **config: Any) -> str:
    path = make_tiny_checkpoint(directory, family, vocab_size=512, eos_token_id=0, **config)
    for f in demo_tokenizer_path().iterdir():
        shutil.copy(f, path / f.name)
    return str(path)


@pytest.fixture(scope="module")
def llama4(tmp_path_factory: pytest.TempPathFactory) -> str:
    """4 layers, a tied head: the last stage keeps the embedding."""
    return _checkpoint(
        tmp_path_factory.mktemp("pp-llama"), "llama", num_hidden_layers=4, tie_word_embeddings=True
    )


def _run(model: str, pp: int, params: SamplingParams = GREEDY, **kwargs: Any) -> list[Any]:
    with LLM(model, pipeline_parallel_size=pp, **ENGINE, **kwargs) as llm:
        outs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], params, use_tqdm=False)
    if params is GREEDY:
        return [list(o.outputs[0].token_ids) for o in outs]
    return outs


@pytest.fixture(scope="module")
def reference(llama4: str) -> list[list[int]]:
    return _run(llama4, 1)


@pytest.mark.parametrize(
    ("family", "layers", "partition", "pp"),
    [("qwen3", 3, None, 2), ("llama", 4, "3,1", 2), ("qwen3_moe", 3, None, 3),
     # Learned positions and project_in on the first stage, project_out on the last, and
     # post-norm layers that carry no residual between stages.
     pytest.param("opt_350m", 3, None, 2, marks=pytest.mark.slow),
     # GPT-2's Conv1D weights, read by their stage; its tied head on the last stage.
     pytest.param("gpt2", 3, None, 2, marks=pytest.mark.slow)],
)  # fmt: skip
def test_pp_gives_the_single_worker_tokens(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    family: Family,
    layers: int,
    partition: str | None,
    pp: int,
) -> None:
    """3 layers over 2 stages: vLLM's uneven split (2, 1); 4 layers under
    VLLM_PP_LAYER_PARTITION=3,1; 3 stages (a middle one that receives and sends on).
    Logprobs and prompt logprobs come from the last stage's logits, as on one worker."""
    if partition is not None:
        monkeypatch.setenv(PARTITION_ENV, partition)
    model = _checkpoint(tmp_path, family, num_hidden_layers=layers)
    pp_n, pp1 = _run(model, pp, PARAMS), _run(model, 1, PARAMS)
    assert [o.outputs[0].token_ids for o in pp_n] == [o.outputs[0].token_ids for o in pp1]
    assert _prompt_logprobs(pp_n[0]) == pytest.approx(_prompt_logprobs(pp1[0]), abs=1e-4)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])  # the rank machinery is loop-agnostic
async def test_pp2_stages_overlap_count_their_bytes_and_survive_a_killed_and_a_hung_stage(
    llama4: str, reference: list[list[int]], anyio_backend: str
) -> None:
    async with AsyncEngine.open(
        llama4, pipeline_parallel_size=2, tp_collective_timeout_s=2.0, **ENGINE
    ) as engine:
        assert await _batch(engine, "a") == reference
        stats = await engine.collective_rpc("statistics")
        assert [s.rank for s in stats] == [0, 1]
        # rank 1 holds stage 0 (layers 0-1), rank 0 the last stage (layers 2-3).
        assert await engine.collective_rpc(kv_layers) == [2, 2]
        sent, received = stats[1].comm.pipe_bytes_sent, stats[0].comm.pipe_bytes_received
        assert sent == received > 0  # [2, T, H] float32 per step, stage 0 -> stage 1
        assert stats[1].comm.pipe_sends == stats[0].comm.pipe_recvs
        # Two steps were in flight at once (the stages overlapped): the prompts' chunks
        # fill a second batch while the first is still in the pipeline.
        assert stats[0].max_pending_seen == 2

        # kill -9 of the first stage mid-batch: the group is replaced, nothing is lost.
        group = _group(engine)

        async def kill_stage0() -> None:
            os.kill(group.rank_pid(1), signal.SIGKILL)

        assert await _batch_killing(engine, kill_stage0) == reference
        assert group.generation == 1
        # A hung stage (stopped, alive): rank 0's receive times out, the group is replaced.

        async def stop_stage0() -> None:
            os.kill(group.rank_pid(1), signal.SIGSTOP)

        assert await _batch_killing(engine, stop_stage0) == reference
        assert group.generation == 2
        assert await _batch(engine, "after") == reference


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_pp2_over_ray_equals_one_worker(
    llama4: str, reference: list[list[int]], anyio_backend: str, ray_cluster: LocalRayCluster
) -> None:
    """Rank 0 (the last stage) stays on the engine's worker thread, so that it sends the
    next step out while the stages work; stage 0 is a Ray actor of the cluster, and the
    store and every gloo pair are bound to the address Ray gives the node (what crosses
    hosts), not loopback."""
    async with AsyncEngine.open(
        llama4, pipeline_parallel_size=2, distributed_executor_backend="ray", **ENGINE
    ) as engine:
        assert await _batch(engine, "r") == reference
        stats = await engine.collective_rpc("statistics")
        assert [s.rank for s in stats] == [0, 1]
        ranks = stats[0].tensor_parallel.ranks
        assert ranks.placement_group.startswith("actorllm-pp-")
        (rank1,) = ranks.ranks
        assert rank1.pid in set(ray_cluster.processes())
        assert rank1.node_ip == connect().util.get_node_ip_address()
        assert _group(engine)._gloo_host == rank1.node_ip
        assert stats[1].comm.pipe_bytes_sent == stats[0].comm.pipe_bytes_received > 0
        assert stats[0].max_pending_seen == 2  # the stages overlapped
        assert await engine.collective_rpc(kv_layers) == [2, 2]

        async def kill_stage0() -> None:
            os.kill(rank1.pid, signal.SIGKILL)

        assert await _batch_killing(engine, kill_stage0) == reference
        assert _group(engine).generation == 1


def _quantized_pp(model: str, pp: int, **kw: Any) -> tuple[list[list[int]], list[int]]:
    """Greedy tokens of PROMPTS and each stage's weight bytes."""
    with LLM(model, pipeline_parallel_size=pp, **ENGINE, **kw) as llm:
        outs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], GREEDY, use_tqdm=False)
        held = llm.collective_rpc(weight_bytes)
    return [list(o.outputs[0].token_ids) for o in outs], held


@pytest.mark.usefixtures("float_inputs")
@pytest.mark.parametrize("fmt", ["gptq-desc_act", "gguf-Q4_K_M"])
def test_a_quantized_model_splits_into_stages_of_its_own_layers(tmp_path: Path, fmt: str) -> None:
    """Each stage reads its own layers' packed tensors (a GGUF file: its own ``blk.N``
    blocks; the rest of the file is another stage's, not an unused tensor)."""
    kw: dict[str, Any] = {}
    if fmt.startswith("gguf"):
        mix = {"v_proj": "Q6_K", "down_proj": "Q6_K"}  # Q4_K_M's
        _ref, path = write_gguf(
            tmp_path, "llama", qtype="Q4_K", head_type="Q6_K", overrides=mix, num_layers=4
        )
        model, kw = str(path), {"tokenizer": str(demo_tokenizer_path())}
    else:
        _ref, quant = write_quantized(tmp_path, "gptq", desc_act=True, vocab_size=512,
                                      eos_token_id=0, num_layers=4)  # fmt: skip
        for f in demo_tokenizer_path().iterdir():
            shutil.copy(f, quant / f.name)
        model = str(quant)
    (pp2, held2), (pp1, held1) = _quantized_pp(model, 2, **kw), _quantized_pp(model, 1, **kw)
    assert pp2 == pp1
    assert len(held2) == 2 and all(b < 0.8 * held1[0] for b in held2), (held2, held1)


def test_what_pipeline_parallel_is_not_built_with_is_refused_by_name(tmp_path: Path) -> None:
    for field, value in [
        ("tensor_parallel_size", 2),
        ("data_parallel_size", 2),
        ("enable_lora", True),
        ("speculative_config", {"method": "ngram", "num_speculative_tokens": 2}),
        ("async_scheduling", True),
        ("kv_connector", "offload"),
    ]:
        with pytest.raises(EngineConfigError) as err:
            EngineConfig(pipeline_parallel_size=2, **{field: value})
        assert err.value.param == field, field
    with pytest.raises(EngineConfigError, match="at least 1"):
        EngineConfig(pipeline_parallel_size=0)
