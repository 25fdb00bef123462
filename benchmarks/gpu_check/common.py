"""What every group of the GPU check shares: where it runs, its JSON, scripted schedules."""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler_output import CachedRequestData, NewRequestData, SchedulerOutput


@dataclass
class Ctx:
    """One group's run: the device it measures (CPU in a dry run), its output, its checks."""

    group: str
    out: Path
    dry_run: bool
    work: Path  # scratch folder (checkpoints)
    checks: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def device(self) -> str:
        return "cpu" if self.dry_run else "cuda"

    @property
    def dtype(self) -> str:
        """bf16 on the GPU; float32 in the dry run (the CPU twin checks the logic, not bf16)."""
        return "float32" if self.dry_run else "bfloat16"

    @property
    def backend(self) -> str:
        """Triton on the GPU; torch on CPU (Triton's interpreter is far too slow here)."""
        return "torch" if self.dry_run else "triton"

    def check(self, name: str, ok: bool | None, **detail: Any) -> bool | None:
        """Record one check: ok True/False, or None for a measurement with no pass mark."""
        self.checks.append({"name": name, "ok": ok, **detail})
        mark = {True: "ok  ", False: "FAIL", None: "    "}[ok]
        print(f"[{self.group}] {mark} {name} {json.dumps(detail, default=str)[:300]}", flush=True)
        return ok

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """A sub-check that records its exception instead of ending the group."""
        t0 = time.perf_counter()
        try:
            yield
        except Exception as e:
            import traceback

            tb = traceback.format_exc()[-3000:]
            self.check(name, False, error=f"{type(e).__name__}: {e}"[:800], traceback=tb)
        finally:
            self.extra.setdefault("step_seconds", {})[name] = round(time.perf_counter() - t0, 2)


def device_info(dry_run: bool) -> dict[str, Any]:
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "host": platform.node(),
        "dry_run": dry_run,
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if not dry_run and torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(
            device=torch.cuda.get_device_name(0),
            capability=list(torch.cuda.get_device_capability(0)),
            sms=p.multi_processor_count,
            memory_gib=round(p.total_memory / 2**30, 1),
            cuda=torch.version.cuda,
        )
    else:
        info["device"] = f"cpu ({os.cpu_count()} cores)"
    return info


def write_result(ctx: Ctx, status: str, seconds: float, **more: Any) -> Path:
    failed = [c["name"] for c in ctx.checks if c.get("ok") is False]
    payload = {
        "group": ctx.group,
        "status": status if status != "pass" or not failed else "fail",
        "seconds": round(seconds, 2),
        "failed": failed,
        "info": device_info(ctx.dry_run),
        "checks": ctx.checks,
        **ctx.extra,
        **more,
    }
    path = ctx.out / f"{ctx.group}.json"
    path.write_text(json.dumps(payload, indent=1, default=str))
    return path


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()  # deliberate: a timing boundary


def greedy(max_tokens: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)


def decode_schedule(
    prompts: dict[str, list[int]],
    steps: int,
    block_size: int,
    params: SamplingParams,
    groups: int = 1,
) -> list[SchedulerOutput]:
    """Step 0 prefills every prompt whole; steps 1..``steps`` decode one token per request
    (placeholder inputs: the async path feeds the previous step's samples on the device).
    Blocks are laid out one request after another, from block 1 (0 is the null block), a
    table per KV cache group (``groups``: hybrid models have several)."""
    blocks: dict[str, tuple[list[int], ...]] = {}
    nxt = 1
    for r, p in prompts.items():
        n = -(-(len(p) + steps + 1) // block_size)
        blocks[r] = tuple(list(range(nxt + g * n, nxt + (g + 1) * n)) for g in range(groups))
        nxt += groups * n
    new = [
        NewRequestData(
            req_id=r, prompt_token_ids=p, output_token_ids=[], sampling_params=params,
            block_ids=blocks[r], num_computed_tokens=0,
        )
        for r, p in prompts.items()
    ]  # fmt: skip
    out = [
        SchedulerOutput(
            step_id=0, scheduled_new_reqs=new, scheduled_cached_reqs=[],
            num_scheduled_tokens={r: len(p) for r, p in prompts.items()},
            total_num_scheduled_tokens=sum(map(len, prompts.values())),
        )
    ]  # fmt: skip
    for k in range(1, steps + 1):
        cached = [
            CachedRequestData(
                req_id=r,
                new_block_ids=tuple([] for _ in range(groups)),
                num_computed_tokens=len(p) + k - 1,
            )
            for r, p in prompts.items()
        ]
        out.append(
            SchedulerOutput(
                step_id=k, scheduled_new_reqs=[], scheduled_cached_reqs=cached,
                num_scheduled_tokens=dict.fromkeys(prompts, 1),
                total_num_scheduled_tokens=len(prompts),
            )
        )  # fmt: skip
    return out


def blocks_needed(
    prompts: dict[str, list[int]], steps: int, block_size: int, groups: int = 1
) -> int:
    return 1 + groups * sum(-(-(len(p) + steps + 1) // block_size) for p in prompts.values())


def random_prompts(n: int, length: int, vocab: int, seed: int = 0) -> dict[str, list[int]]:
    g = torch.Generator().manual_seed(seed)
    return {f"r{i}": torch.randint(3, vocab, (length,), generator=g).tolist() for i in range(n)}


def collect(outs: list[Any]) -> dict[str, list[int]]:
    tokens: dict[str, list[int]] = {}
    for out in outs:
        for r, t in zip(out.req_ids, out.sampled_token_ids, strict=True):
            tokens.setdefault(r, []).extend(t)
    return tokens


def run_async(runner: Any, steps: list[SchedulerOutput]) -> list[Any]:
    """Two steps in flight, as the engine's step pipeline runs them: launch N+1, read N."""
    outs, prev = [], None
    for so in steps:
        cur = runner.launch(so)
        if prev is not None:
            outs.append(prev.result())
        prev = cur
    if prev is not None:
        outs.append(prev.result())
    return outs


def timed_async(runner: Any, steps: list[SchedulerOutput], start: int, label: str = "") -> float:
    """:func:`run_async`, timed from step ``start`` (earlier steps resolved first, then a
    device sync) to the last result; ``label`` names that window in a profiler trace."""
    prev, t0 = None, 0.0
    window = torch.profiler.record_function(label) if label else None
    for i, so in enumerate(steps):
        if i == start:
            if prev is not None:
                prev.result()
                prev = None
            sync(runner.device.type)
            t0 = time.perf_counter()
            if window is not None:
                window.__enter__()
        cur = runner.launch(so)
        if prev is not None:
            prev.result()
        prev = cur
    if prev is not None:
        prev.result()
    if window is not None:
        window.__exit__(None, None, None)
    return time.perf_counter() - t0
