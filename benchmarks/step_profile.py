"""Per-op breakdown of one model step on CPU (issue #17): a decode step of N rows and a
prefill chunk, on the ``qwen3-75m`` bench shape with dummy weights, through the same
model, sampler and kernels the engine runs (not the engine loop: its overhead is
``actorllm bench throughput --profile``'s business).

    PYTHONPATH=$PWD python benchmarks/step_profile.py --dtype bfloat16 --rows 128

Prints milliseconds per step for each part (each linear by its weight shape, attention,
norms, rotary, activation, LM head, sampler), from ``torch.profiler``: the minimum over
``--iters`` separately profiled steps; and the unprofiled wall (mean and min), CPU time
and page faults per step. ``--threads 1`` compares against one core's floors
(``benchmarks/roofline.py``, docs/cpu_performance.md) and is steadier on a shared box.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from actorllm.bench.machine import result_document, write_json
from actorllm.bench.presets import get_preset, preset_model_dir
from actorllm.kernels import amx_linear, bf16_dot_linear
from actorllm.kernels.ops import Ops
from actorllm.kernels.sampling import sample_from_logits
from actorllm.models.attention import AttentionMetadata
from actorllm.models.config import CheckpointConfig
from actorllm.models.loader import load_model
from actorllm.models.onednn_linear import prepack_linears
from actorllm.worker.kv_cache import allocate_kv_caches, cpu_kv_layout
from actorllm.worker.malloc_tuning import keep_freed_memory
from actorllm.worker.omp_spin import release_thread_team

BLOCK = 16


def decode_meta(ctx: list[int], first_block: int) -> tuple[AttentionMetadata, torch.Tensor]:
    """One decode row per request with context ``ctx[b]`` (this token included)."""
    n = len(ctx)
    nb = max(-(-c // BLOCK) for c in ctx)
    table = torch.zeros(n, nb, dtype=torch.int32)  # [B, NB]
    slots, start = [], first_block
    for b, c in enumerate(ctx):
        k = -(-c // BLOCK)
        table[b, :k] = torch.arange(start, start + k, dtype=torch.int32)
        slots.append(int(table[b, (c - 1) // BLOCK]) * BLOCK + (c - 1) % BLOCK)
        start += k
    meta = AttentionMetadata(
        query_start_loc=torch.arange(n + 1, dtype=torch.int32),
        seq_lens=torch.tensor(ctx, dtype=torch.int32),
        block_table=table,
        slot_mapping=torch.tensor(slots, dtype=torch.int64),
        query_start_loc_cpu=list(range(n + 1)),
        seq_lens_cpu=list(ctx),
        max_query_len=1,
        max_seq_len=max(ctx),
    )
    return meta, torch.tensor([c - 1 for c in ctx])


def prefill_meta(lens: list[int]) -> tuple[AttentionMetadata, torch.Tensor]:
    """Whole prompts of ``lens`` tokens, one chunk."""
    qsl = [0]
    for n in lens:
        qsl.append(qsl[-1] + n)
    nb = max(-(-n // BLOCK) for n in lens)
    table = torch.zeros(len(lens), nb, dtype=torch.int32)
    slots, pos, start = [], [], 1
    for b, n in enumerate(lens):
        k = -(-n // BLOCK)
        table[b, :k] = torch.arange(start, start + k, dtype=torch.int32)
        slots += [int(table[b, i // BLOCK]) * BLOCK + i % BLOCK for i in range(n)]
        pos += list(range(n))
        start += k
    meta = AttentionMetadata(
        query_start_loc=torch.tensor(qsl, dtype=torch.int32),
        seq_lens=torch.tensor(lens, dtype=torch.int32),
        block_table=table,
        slot_mapping=torch.tensor(slots, dtype=torch.int64),
        query_start_loc_cpu=qsl,
        seq_lens_cpu=list(lens),
        max_query_len=max(lens),
        max_seq_len=max(lens),
    )
    return meta, torch.tensor(pos)


def classify(name: str, shapes: list[list[int]], cfg: CheckpointConfig) -> str:
    """A profiler op (by name and input shapes) -> the part of the step it belongs to."""
    if name in (
        "aten::linear",
        "aten::addmm",
        "aten::mm",
        "aten::matmul",
        "mkldnn::_linear_pointwise",
    ):
        w = shapes[1] if len(shapes) > 1 else []
        h, hq, hk, d = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        rows = w[0] if w else -1
        table = {
            (hq + 2 * hk) * d: "linear qkv",
            2 * cfg.intermediate_size: "linear gate_up",
            cfg.vocab_size: "linear lm_head",
        }
        if rows in table:
            return table[rows]
        if rows == h and w[1] == hq * d:
            return "linear o_proj"
        if rows == h and w[1] == cfg.intermediate_size:
            return "linear down"
        return f"linear {w}"
    return name


def _ranged(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*a: Any, **kw: Any) -> Any:
        with torch.profiler.record_function(name):
            return fn(*a, **kw)

    return wrapped


def add_ranges(model: nn.Module, cfg: CheckpointConfig) -> None:
    """Wrap the model's kernels and norms in ``part:`` profiler ranges (this script only:
    the engine runs without them)."""
    ops: Ops = next(getattr(m, "ops") for m in model.modules() if hasattr(m, "ops"))  # noqa: B009
    names = ("rms_norm", "fused_add_rms_norm", "apply_rotary", "silu_and_mul")
    parts = {n: "part:norms" if "norm" in n else f"part:{n}" for n in names}
    parts |= {"write_kv_cache": "part:kv_write", "paged_attention": "part:attention"}
    if ops.qk_norm_rotary is not None:  # q / k norms and rotary fused: one part of its own
        parts["qk_norm_rotary"] = "part:qk_norm_rotary"
    wrapped: dict[str, Any] = {n: _ranged(p, getattr(ops, n)) for n, p in parts.items()}
    ranged = dataclasses.replace(ops, **wrapped)
    for m in model.modules():
        if hasattr(m, "ops"):
            setattr(m, "ops", ranged)  # noqa: B010
    _range_amx_linears(cfg)


def _range_amx_linears(cfg: CheckpointConfig) -> None:
    """The few-rows kernels (kernels/amx_linear.py, kernels/bf16_dot_linear.py) are ctypes
    calls the profiler does not see: each call gets a range named by its weight's part
    (``part:linear gate_up``)."""
    for kernel in (amx_linear, bf16_dot_linear):
        if getattr(kernel.linear, "ranged", False):
            continue
        kernel.linear = _ranged_linear(kernel.linear, cfg)  # type: ignore[method-assign]


def _ranged_linear(plain: Callable[..., torch.Tensor], cfg: CheckpointConfig) -> Any:
    def ranged(x: torch.Tensor, packed: torch.Tensor, n: int, bias: Any) -> torch.Tensor:
        label = classify("aten::linear", [list(x.shape), [n, x.shape[-1]]], cfg)
        with torch.profiler.record_function(f"part:{label}"):
            return plain(x, packed, n, bias)

    ranged.ranged = True  # type: ignore[attr-defined]
    return ranged


def profile_step(
    fn: Callable[[], None], iters: int, cfg: CheckpointConfig
) -> tuple[float, dict[str, float]]:
    """Mean unprofiled wall per step, and each part's time: the minimum over ``iters``
    separately profiled steps (on a shared box the minimum is the machine, the rest is
    the neighbours descheduling us)."""
    for _ in range(3):
        fn()
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    walls, cpus = [], []
    for _ in range(iters):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        walls.append((time.perf_counter() - t0) * 1e3)
        cpus.append((time.process_time() - c0) * 1e3)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0) / iters
    best: dict[str, float] = {}
    for _ in range(iters):
        with torch.profiler.profile(record_shapes=True) as prof:
            fn()
        for k, v in _step_parts(prof, cfg).items():
            best[k] = min(best.get(k, v), v)
    parts = {k: v for k, v in best.items() if k.startswith("part:")}
    ops = {k: v for k, v in best.items() if not k.startswith("part:")}
    parts["page_faults_per_step"] = faults  # a count: fresh pages the step touched
    parts["cpu_ms"] = sum(cpus) / iters  # all threads' CPU time: steadier than wall
    parts["min_wall_ms"] = min(walls)
    return sum(walls) / iters, {**parts, **dict(sorted(ops.items(), key=lambda kv: -kv[1]))}


def _step_parts(prof: torch.profiler.profile, cfg: CheckpointConfig) -> dict[str, float]:
    """One profiled step -> ms per part (``part:`` ranges) and per op (self time; linears
    by weight shape, total time)."""
    out: dict[str, float] = defaultdict(float)
    for ev in prof.key_averages(group_by_input_shape=True):
        if ev.key.startswith("part:"):
            out[ev.key] += ev.cpu_time_total / 1e3
            continue
        label = classify(ev.key, ev.input_shapes or [], cfg)
        # linear: total time (its children are addmm/mm); others: self time.
        if label.startswith("linear"):
            if ev.key in ("aten::linear", "mkldnn::_linear_pointwise"):
                out[label] += ev.cpu_time_total / 1e3
        elif ev.key not in ("aten::addmm", "aten::mm", "aten::matmul"):
            out[label] += ev.self_cpu_time_total / 1e3
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="qwen3-75m-bf16", help="the model shape (bench preset)")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--ctx", type=int, default=240, help="decode rows' mean context")
    ap.add_argument("--prefill", default="160,160,160,160,160,160,160,160,160,160,160,160")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--top", type=int, default=14)
    ap.add_argument("--json", default=None)
    ap.add_argument("--phases", default="decode,prefill", help="which steps to profile")
    ap.add_argument("--onednn", action=argparse.BooleanOptionalAction, default=True)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    release_thread_team()  # the engine's OpenMP wait regime (worker/omp_spin.py)
    keep_freed_memory()  # and its malloc settings (worker/malloc_tuning.py)
    preset = get_preset(args.preset)
    path = preset_model_dir(preset.model_name, preset.model_config)
    cfg = CheckpointConfig.from_dict(json.loads((Path(path) / "config.json").read_text()))
    model = load_model(path, cfg, dtype=args.dtype, load_format="dummy")
    if args.onednn:
        print("prepacked linears:", prepack_linears(model))
    add_ranges(model, cfg)
    g = torch.Generator().manual_seed(0)
    ctx = (torch.randint(-40, 41, (args.rows,), generator=g) + args.ctx).tolist()
    lens = [int(x) for x in args.prefill.split(",")]
    blocks = sum(-(-c // BLOCK) for c in ctx) + sum(-(-n // BLOCK) for n in lens) + 2
    caches = allocate_kv_caches(
        cfg, blocks, BLOCK, getattr(torch, args.dtype), "cpu", layout=cpu_kv_layout()
    )
    for kc, vc in caches:  # a real cache holds keys/values, not allocation garbage
        kc.normal_(generator=g)
        vc.normal_(generator=g)
    dmeta, dpos = decode_meta(ctx, 1)
    pmeta, ppos = prefill_meta(lens)
    ids_d = torch.randint(0, cfg.vocab_size, (args.rows,), generator=g)
    ids_p = torch.randint(0, cfg.vocab_size, (len(ppos),), generator=g)
    temp = torch.full((args.rows,), 0.6)
    top_k = torch.zeros(args.rows, dtype=torch.int32)
    top_p, min_p = torch.ones(args.rows), torch.zeros(args.rows)
    last = torch.tensor(pmeta.query_start_loc_cpu[1:]) - 1

    def decode() -> None:
        with torch.inference_mode():
            dmeta.plan_cache.clear()
            hidden = model(ids_d, dpos, dmeta, caches)  # [N, H]
            with torch.profiler.record_function("part:lm_head"):
                logits = model.compute_logits(hidden, float32=False)  # [N, V], as the runner
            with torch.profiler.record_function("part:sampler"):
                u = torch.rand(args.rows, generator=g)
                # consume: the Sampler hands over its own logits (worker/sampler.py)
                sample_from_logits(logits, temp, top_k, top_p, min_p, None, u, consume=True)

    def prefill() -> None:
        with torch.inference_mode():
            pmeta.plan_cache.clear()
            hidden = model(ids_p, ppos, pmeta, caches)  # [T, H]
            model.compute_logits(hidden[last])

    out = {}
    phases = args.phases.split(",")
    for name, fn in [p for p in (("decode", decode), ("prefill", prefill)) if p[0] in phases]:
        wall, parts = profile_step(fn, args.iters, cfg)
        faults, cpu = parts.pop("page_faults_per_step"), parts.pop("cpu_ms")
        low = parts.pop("min_wall_ms")
        print(
            f"== {name} ({args.dtype}): {wall:.2f} ms per step (unprofiled wall; min "
            f"{low:.2f}), CPU {cpu:.2f} ms, {faults:.0f} page faults per step; parts: "
            "min over steps"
        )
        for k, v in list(parts.items())[: args.top]:
            print(f"  {k:<40} {v:8.2f} ms")
        out[name] = {
            "wall_ms": wall,
            "min_wall_ms": low,
            "cpu_ms": cpu,
            "page_faults_per_step": faults,
            "parts_ms": parts,
        }
    if args.json:
        write_json(args.json, result_document("step_profile", figures=out, args=args))


if __name__ == "__main__":
    main()
