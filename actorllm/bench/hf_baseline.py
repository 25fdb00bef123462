"""The classic baseline: transformers' ``generate`` on static, left-padded batches.

Requests are taken in workload order, ``batch_size`` at a time. A batch is padded on the
left to its longest prompt and decodes for its longest output: ``min_new_tokens =
max_new_tokens`` emulates ``ignore_eos``. Only the tokens each request asked for count as
output tokens; the rest is padding waste, reported as ``padding_waste`` (the fraction of
computed token slots, prompt and output, that no request needed).

    model = load_hf_model(demo_model_path(), dtype="float32")
    fig = run_hf(reqs, model, batch_size=16, temperature=0.6)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from actorllm.bench.datasets import BenchRequest
from actorllm.bench.throughput_run import throughput_figures

_TORCH_DTYPES = {"float32": "float32", "float": "float32", "bfloat16": "bfloat16"}
_TORCH_DTYPES |= {"float16": "float16", "half": "float16"}


def load_hf_model(
    model_dir: str | Path, *, dtype: str = "auto", load_format: str = "auto", device: str = "cpu"
) -> Any:
    """``AutoModelForCausalLM`` in eval mode; ``dtype`` "auto" is float32 on CPU and the
    checkpoint's dtype elsewhere; ``load_format="dummy"`` builds random weights from the
    config (speed does not depend on the weights)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if dtype == "auto":
        torch_dtype: Any = torch.float32 if device == "cpu" else "auto"
    else:
        torch_dtype = getattr(torch, _TORCH_DTYPES[dtype])
    if load_format == "dummy":
        config = AutoConfig.from_pretrained(str(model_dir))
        model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch_dtype)
    return model.to(device).eval()


def run_hf(
    reqs: list[BenchRequest], model: Any, *, batch_size: int, temperature: float = 1.0
) -> dict[str, Any]:
    """Generate the workload in static batches; blocks. Raises ``RuntimeError`` if a batch
    stopped before its longest requested output (EOS must never end it)."""
    import torch

    device = next(model.parameters()).device
    computed = useful = 0
    start = time.perf_counter()
    for lo in range(0, len(reqs), batch_size):
        batch = reqs[lo : lo + batch_size]
        width = max(len(r.prompt_token_ids) for r in batch)
        new = max(r.output_len for r in batch)
        ids = [[0] * (width - len(r.prompt_token_ids)) + r.prompt_token_ids for r in batch]
        mask = [
            [0] * (width - len(r.prompt_token_ids)) + [1] * len(r.prompt_token_ids) for r in batch
        ]
        with torch.inference_mode():
            out = model.generate(
                input_ids=torch.tensor(ids, device=device),
                attention_mask=torch.tensor(mask, device=device),
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=temperature > 0,
                temperature=temperature if temperature > 0 else None,
                top_k=None,
                top_p=None,
                pad_token_id=0,
            )
        if out.shape[1] - width != new:
            raise RuntimeError(f"hf generated {out.shape[1] - width} tokens, expected {new}")
        computed += len(batch) * (width + new)
        useful += sum(len(r.prompt_token_ids) + r.output_len for r in batch)
    elapsed = time.perf_counter() - start
    fig = throughput_figures(
        len(reqs),
        sum(len(r.prompt_token_ids) for r in reqs),
        sum(r.output_len for r in reqs),
        elapsed,
    )
    fig["batch_size"] = batch_size
    fig["padding_waste"] = 1.0 - useful / computed
    return fig


def run_hf_sweep(
    reqs: list[BenchRequest],
    model_dir: str | Path,
    batch_sizes: list[int],
    *,
    dtype: str = "auto",
    load_format: str = "auto",
    device: str = "cpu",
    temperature: float = 1.0,
) -> dict[str, Any]:
    """Run each batch size (capped at the number of requests) and keep the best by output
    tokens/s: ``{"best": figures, "sweep": [figures, ...]}``."""
    model = load_hf_model(model_dir, dtype=dtype, load_format=load_format, device=device)
    warm = [BenchRequest(reqs[0].prompt_token_ids[:16], 4)]
    run_hf(warm, model, batch_size=1, temperature=temperature)
    sizes = sorted({min(b, len(reqs)) for b in batch_sizes})
    sweep = [run_hf(reqs, model, batch_size=b, temperature=temperature) for b in sizes]
    best = max(sweep, key=lambda f: f["output_tokens_per_s"])
    return {"best": best, "sweep": sweep}
