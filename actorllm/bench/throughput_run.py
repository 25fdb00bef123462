"""Offline throughput (vLLM's benchmark_throughput): a whole workload submitted at once.

:func:`run_actorllm` starts an :class:`~actorllm.engine.AsyncEngine` (trio), warms it up
with one short request, then submits every request concurrently and times until the last
one finishes. Every request runs with ``ignore_eos`` and ``max_tokens = output_len``, so the
output token count is exact and checked. :func:`throughput_figures` turns a count and a
time into the three headline rates.

    reqs = random_requests(8, input_len=64, output_len=16)
    fig = run_actorllm(reqs, EngineConfig(load_format="dummy"))
    print(fig["output_tokens_per_s"])

``--structured json`` runs the same workload with every request constrained by one JSON
schema (:func:`structured_workload`): a list of short strings with at least
``output_len`` items, so the grammar cannot end before ``max_tokens`` and the token counts
match the unconstrained run. The grammar is compiled by the warm-up request, so the timed
part measures the per-step cost of constraining (a compiled-grammar cache hit).
"""

from __future__ import annotations

import cProfile
import time
from pathlib import Path
from typing import Any

import anyio

from actorllm.bench.datasets import BenchRequest
from actorllm.engine.config.engine_config import EngineConfig


def throughput_figures(
    num_requests: int, prompt_tokens: int, output_tokens: int, elapsed_s: float
) -> dict[str, Any]:
    return {
        "num_requests": num_requests,
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
        "elapsed_s": elapsed_s,
        "requests_per_s": num_requests / elapsed_s,
        "total_tokens_per_s": (prompt_tokens + output_tokens) / elapsed_s,
        "output_tokens_per_s": output_tokens / elapsed_s,
    }


def structured_workload(kind: str | None, output_len: int) -> Any:
    """The constraint every request of a ``--structured`` run gets (None: unconstrained)."""
    if kind is None or kind == "none":
        return None
    from actorllm.core.structured_outputs_params import StructuredOutputsParams

    if kind != "json":
        raise ValueError(f"--structured must be none or json, got {kind!r}")
    schema = {
        "type": "array",
        "items": {"type": "string"},
        "minItems": output_len,  # each item is at least one token: no early end
    }
    return StructuredOutputsParams(json=schema, disable_any_whitespace=True)


def run_actorllm(
    reqs: list[BenchRequest],
    config: EngineConfig,
    *,
    temperature: float = 1.0,
    profile_dir: str | None = None,
    detokenize: bool = True,
    structured: str | None = None,
    loras: list[Any] | None = None,
    warmups: int = 1,
) -> dict[str, Any]:
    """Run the workload on a fresh engine; blocks until done. Raises ``RuntimeError`` if a
    request produced other than its ``output_len`` tokens.

    ``detokenize=False``: outputs stay token ids (what vLLM does with
    ``skip_tokenizer_init``), so both engines do the same work.

    ``profile_dir``: cProfile the timed part into ``loop.prof`` (the event loop thread:
    actors, scheduler, output processing) and ``worker.prof`` (the model steps on the
    worker thread); read them with ``python -m pstats``.
    """
    so = structured_workload(structured, max(r.output_len for r in reqs))
    return anyio.run(
        _run_actorllm, reqs, config, temperature, profile_dir, detokenize, so, backend="trio"
    )


def _dump_profiles(directory: Path, loop: cProfile.Profile, worker: cProfile.Profile) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    loop.dump_stats(directory / "loop.prof")
    worker.dump_stats(directory / "worker.prof")


async def _run_actorllm(
    reqs: list[BenchRequest],
    config: EngineConfig,
    temperature: float,
    profile_dir: str | None,
    detokenize: bool,
    structured: Any = None,
    loras: list[Any] | None = None,
    warmups: int = 1,
) -> dict[str, Any]:
    from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
    from actorllm.engine import AsyncEngine

    lora_of = loras if loras is not None else [None] * len(reqs)
    async with AsyncEngine.open(config) as engine:
        warm = SamplingParams(max_tokens=4, ignore_eos=True, structured_outputs=structured)
        warm_prompt = {"prompt_token_ids": reqs[0].prompt_token_ids[:16]}
        warm_loras = [None, *dict.fromkeys(x for x in lora_of if x is not None)]
        for i in range(max(warmups, len(warm_loras))):
            lora = warm_loras[i % len(warm_loras)]
            async for _ in engine.generate(warm_prompt, warm, lora_request=lora):
                pass
        stats0 = await engine.get_stats()
        comm0 = await _comm_stats(engine)
        loop_prof, worker_prof = cProfile.Profile(), cProfile.Profile()
        if profile_dir:  # cProfile follows one thread: enable it on the worker's too
            await engine.collective_rpc(lambda _worker: worker_prof.enable())
            loop_prof.enable()
        produced = [0] * len(reqs)

        async def one(i: int) -> None:
            params = SamplingParams(
                max_tokens=reqs[i].output_len,
                ignore_eos=True,
                temperature=temperature,
                output_kind=RequestOutputKind.FINAL_ONLY,
                detokenize=detokenize,
                structured_outputs=structured,
            )
            prompt = {"prompt_token_ids": reqs[i].prompt_token_ids}
            async for out in engine.generate(prompt, params, lora_request=lora_of[i]):
                produced[i] = len(out.outputs[0].token_ids)

        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i in range(len(reqs)):
                tg.start_soon(one, i)
        elapsed = time.perf_counter() - start
        if profile_dir:
            loop_prof.disable()
            await engine.collective_rpc(lambda _worker: worker_prof.disable())
            _dump_profiles(Path(profile_dir), loop_prof, worker_prof)
        stats1 = await engine.get_stats()
        comm1 = await _comm_stats(engine)
    wrong = [i for i, r in enumerate(reqs) if produced[i] != r.output_len]
    if wrong:
        i = wrong[0]
        raise RuntimeError(f"request {i} produced {produced[i]} tokens, not {reqs[i].output_len}")
    fig = throughput_figures(
        len(reqs), sum(len(r.prompt_token_ids) for r in reqs), sum(produced), elapsed
    )
    fig["steps"] = stats1.steps_done - stats0.steps_done
    fig["preemptions"] = stats1.num_preemptions - stats0.num_preemptions
    if comm1:
        steps = [
            e1.steps_done - e0.steps_done
            for e0, e1 in zip(stats0.engines, stats1.engines, strict=True)
        ]
        if engine.config.pipeline_parallel_size > 1:
            fig["pipeline_parallel"] = _pipe_per_step(comm0, comm1, steps[0], elapsed)
        else:
            fig["tensor_parallel"] = _comm_per_step(comm0, comm1, steps, elapsed)
    return fig


async def _comm_stats(engine: Any) -> list[Any]:
    """Each rank's collective counters (tensor or pipeline parallel), else []."""
    if engine.config.tensor_parallel_size == 1 and engine.config.pipeline_parallel_size == 1:
        return []
    return [s.comm for s in await engine.collective_rpc("statistics")]


def _pipe_per_step(before: list[Any], after: list[Any], steps: int, elapsed: float) -> dict:
    """Pipeline parallel: the bytes each stage sent on (its ``[2, T, H]`` hidden states
    and residual, counted at each send) and the time inside sends and receives, per step;
    ``bytes_between_stages_per_step``: the sum over the stages (what crosses hosts when
    the stages are on different hosts). Rank r holds stage (r - 1) % P."""
    n = max(1, steps)
    ranks = []
    for b, a in zip(before, after, strict=True):
        pipe_s = a.pipe_s - b.pipe_s
        ranks.append(
            {
                "rank": a.rank,
                "stage": (a.rank - 1) % len(after),
                "bytes_sent_per_step": (a.pipe_bytes_sent - b.pipe_bytes_sent) / n,
                "bytes_received_per_step": (a.pipe_bytes_received - b.pipe_bytes_received) / n,
                "sends": a.pipe_sends - b.pipe_sends,
                "pipe_ms_per_step": 1e3 * pipe_s / n,
                "pipe_share": pipe_s / elapsed,
            }
        )
    total = sum(r["bytes_sent_per_step"] for r in ranks)
    return {"steps": steps, "bytes_between_stages_per_step": total, "ranks": ranks}


def _comm_per_step(before: list[Any], after: list[Any], steps: list[int], elapsed: float) -> dict:
    """Per rank: time inside collectives (all-reduce + logits gather) and inside the step
    broadcast, per step of its replica and as a share of the run. ``after`` holds every
    replica's ranks, replica 0's first (collective_rpc's order); ``steps``, each replica's
    steps."""
    ranks = []
    world = max(1, len(after) // max(1, len(steps)))
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        coll, bcast = a.collective_s - b.collective_s, a.broadcast_s - b.broadcast_s
        n = max(1, steps[min(i // world, len(steps) - 1)])
        ranks.append(
            {
                "replica": i // world,
                "rank": a.rank,
                "all_reduces_per_step": (a.all_reduces - b.all_reduces) / n,
                "collective_ms_per_step": 1e3 * coll / n,
                "broadcast_ms_per_step": 1e3 * bcast / n,
                "collective_share": coll / elapsed,
                "broadcast_share": bcast / elapsed,
            }
        )
    return {"ranks": ranks}
