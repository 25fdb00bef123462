"""Quantized decode throughput: the same random model in bf16 and in each quantized format,
decode tokens/s at batch 1 and batched, ratios against bf16 measured in the same run.

    $ actorllm bench quant                                   # Qwen3 shape, hidden 1024, 8 layers
    $ actorllm bench quant --layers 28 --batches 1,8,64 --rounds 3 --output quant.json

Variants (``--variants``): ``bf16`` (the baseline), ``gptq4`` (GPTQ int4, group 128,
symmetric), ``awq4`` (AWQ int4, group 128, zero points), ``w8a8`` (compressed-tensors
int8 weights per channel, dynamic per-token int8 activations), ``gguf-q8_0``,
``gguf-q4_0`` and ``gguf-q4_k_m`` (GGUF files of random blocks, the tied head quantized
too; Q4_K_M: Q4_K with attn_v, ffn_down and the head in Q6_K),
``gptq4-w4a16`` (the GPTQ model with ``VLLM_CPU_INT4_W4A8=0``: inputs kept in float, where
4-bit rows otherwise quantize them to int8; each row records which it ran),
``gguf-q8_0-a16`` (the Q8_0 file with ``ACTORLLM_CPU_GGUF_A8=0``: the same for 8-bit
blocks), and
``bf16-fp8kv`` (the bf16 model with ``kv_cache_dtype="fp8"``: every variant gets the same
KV budget, and each row records the KV blocks it bought). The budget is what a bf16 cache
needs to hold every request of the largest batch at once (at least 64 MiB), so no row
measures requests waiting for KV blocks. The safetensors
formats load with ``load_format=dummy`` (random weights in the packed layouts: speed does
not depend on the values); the GGUF files are written once into the bench-model cache.
GPTQ / AWQ / W8A8 keep the LM head in bf16 (their checkpoints do); ``gptq4-head`` is the
GPTQ model written with ``lm_head: true`` (GPTQModel's option; an untied head, quantized
like the layers), whose bf16 twin reads the same head bytes a step as the tied baseline;
GGUF's head is the quantized ``token_embd``.

Each round opens every variant's engine in turn, alone in the process (warmed up, then
closed: see ``_engine``), and for each batch size submits that many requests of
``--prompt-len`` random tokens and ``--output-len`` outputs together: the decode rate is
the tokens after each request's first, over the time from the last first token to the
last token (prefill excluded). Rows of one round are a minute or so apart, so load on a
shared machine hits the baseline and the quantized rows alike; a row's ratio is the
median over rounds of its rate over the bf16 rate of the same round. Weight bytes are the
runner's own count.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio

VARIANTS = (
    "bf16", "gptq4", "awq4", "w8a8", "gguf-q8_0", "gguf-q4_0", "gguf-q4_k_m", "gptq4-w4a16",
    "gguf-q8_0-a16", "bf16-fp8kv", "gptq4-head",
)  # fmt: skip
# GGUF mixes: the tensors (by the name before ".weight") in another type than the file's
# main one. Q4_K_M as llama.cpp writes it keeps attn_v and ffn_down in Q6_K in about half
# the layers and the head in Q6_K; here every layer's, and the tied token_embd as the head.
_MIXES = {"Q4_K_M": {"attn_v": "Q6_K", "ffn_down": "Q6_K", "token_embd": "Q6_K"}}
# Variants that differ from another's checkpoint only in engine settings.
_SAME_MODEL = {"bf16-fp8kv": "bf16", "gptq4-w4a16": "gptq4", "gguf-q8_0-a16": "gguf-q8_0"}
_KV_DTYPE = {"bf16-fp8kv": "fp8"}
_ENV = {  # set while the model is built
    "gptq4-w4a16": {"ACTORLLM_CPU_INT4_W4A8": "0"},
    "gguf-q8_0-a16": {"ACTORLLM_CPU_GGUF_A8": "0"},
}
_GPTQ4 = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False,
          "sym": True, "checkpoint_format": "gptq"}  # fmt: skip
# Variants whose checkpoints store their own LM head (the others tie it to the embedding).
_UNTIED = ("gptq4-head",)
_QUANT_CONFIGS: dict[str, dict[str, Any]] = {
    "gptq4": _GPTQ4,
    "gptq4-head": _GPTQ4 | {"lm_head": True},
    "awq4": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
             "version": "gemm"},
    "w8a8": {
        "quant_method": "compressed-tensors", "format": "int-quantized", "ignore": ["lm_head"],
        "config_groups": {"group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel",
                        "dynamic": False},
            "input_activations": {"num_bits": 8, "type": "int", "symmetric": True,
                                  "strategy": "token", "dynamic": True},
        }},
    },
}  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hidden-size", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--intermediate-size", type=int, default=3072)
    parser.add_argument("--vocab-size", type=int, default=151936)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--batches", default="1,8", help="concurrent requests per row")
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default=None, help="write the results as JSON here")


def model_shape(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": args.vocab_size,
        "hidden_size": args.hidden_size,
        "num_hidden_layers": args.layers,
        "num_attention_heads": args.heads,
        "num_key_value_heads": args.kv_heads,
        "head_dim": args.head_dim,
        "intermediate_size": args.intermediate_size,
        "tie_word_embeddings": True,
        "dtype": "bfloat16",
    }


def kv_budget(shape: dict[str, Any], batches: list[int], args: argparse.Namespace) -> int:
    """KV cache bytes that hold every request of the largest batch in a bf16 cache (a
    block's worth of slack a request), at least 64 MiB; whole MiB."""
    kv_width = shape["num_key_value_heads"] * shape["head_dim"]
    per_token = 2 * shape["num_hidden_layers"] * kv_width * 2  # K and V, bf16
    tokens = max(batches) * (args.prompt_len + args.output_len + 8 + 16)
    return max(64, -(-tokens * per_token // 2**20)) * 2**20


def _tag(shape: dict[str, Any]) -> str:
    return (
        f"qwen3-h{shape['hidden_size']}-l{shape['num_hidden_layers']}-i"
        f"{shape['intermediate_size']}-v{shape['vocab_size']}"
    )


def variant_model(variant: str, shape: dict[str, Any]) -> tuple[str, str]:
    """(model path, load_format) of ``variant`` (built once into the bench-model cache)."""
    from actorllm.bench.presets import preset_model_dir

    variant = _SAME_MODEL.get(variant, variant)
    if variant.startswith("gguf-"):
        return str(gguf_file(variant.removeprefix("gguf-").upper(), shape)), "auto"
    extra: dict[str, Any] = {}
    if variant != "bf16":
        extra["quantization_config"] = _QUANT_CONFIGS[variant]
    if variant in _UNTIED:
        extra["tie_word_embeddings"] = False
    return str(preset_model_dir(f"{_tag(shape)}-{variant}", {**shape, **extra})), "dummy"


def gguf_file(qtype_name: str, shape: dict[str, Any]) -> Path:
    """A GGUF file of ``shape`` (qwen3, tied) with every matrix random ``qtype`` blocks
    (a mix such as ``Q4_K_M``: each tensor in its type, :data:`_MIXES`)."""
    import gguf
    import numpy as np

    from actorllm.demo.model import cache_dir
    from actorllm.testing.random_gguf import random_blocks

    path = cache_dir() / "bench-models" / f"{_tag(shape)}-{qtype_name}.gguf"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    T = gguf.GGMLQuantizationType
    qtype = T[qtype_name.removesuffix("_M")]  # Q4_K_M: Q4_K, with _MIXES' tensors in Q6_K
    rng = np.random.default_rng(0)
    h, inter, hd = shape["hidden_size"], shape["intermediate_size"], shape["head_dim"]
    q, kv = shape["num_attention_heads"] * hd, shape["num_key_value_heads"] * hd
    tmp = path.with_suffix(".tmp")
    w = gguf.GGUFWriter(str(tmp), "qwen3")
    w.add_context_length(4096)
    w.add_embedding_length(h)
    w.add_block_count(shape["num_hidden_layers"])
    w.add_feed_forward_length(inter)
    w.add_head_count(shape["num_attention_heads"])
    w.add_head_count_kv(shape["num_key_value_heads"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(shape["vocab_size"])

    def matrix(name: str, rows: int, cols: int) -> None:
        other = _MIXES.get(qtype_name, {}).get(name.rsplit(".", 2)[-2])
        t = qtype if other is None else T[other]
        w.add_tensor(name, random_blocks(rows, cols, t, rng, (0.0005, 0.001)), raw_dtype=t)

    matrix("token_embd.weight", shape["vocab_size"], h)
    w.add_tensor("output_norm.weight", np.ones(h, dtype=np.float32))
    for i in range(shape["num_hidden_layers"]):
        for name, rows, cols in (
            ("attn_q", q, h), ("attn_k", kv, h), ("attn_v", kv, h), ("attn_output", h, q),
            ("ffn_gate", inter, h), ("ffn_up", inter, h), ("ffn_down", h, inter),
        ):  # fmt: skip
            matrix(f"blk.{i}.{name}.weight", rows, cols)
        for norm, n in (("attn_norm", h), ("ffn_norm", h), ("attn_q_norm", hd),
                        ("attn_k_norm", hd)):  # fmt: skip
            w.add_tensor(f"blk.{i}.{norm}.weight", np.ones(n, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.rename(path)
    return path


async def _decode_rate(engine: Any, batch: int, args: argparse.Namespace, rng: Any) -> float:
    """Decode tokens/s of ``batch`` requests submitted together (prefill excluded)."""
    from actorllm.core.sampling_params import RequestOutputKind, SamplingParams

    # Per request: (time of its first token, of its last, tokens produced).
    seen: list[tuple[float, float, int]] = []

    async def one(seen: list[tuple[float, float, int]]) -> None:
        params = SamplingParams(
            max_tokens=args.output_len, ignore_eos=True, temperature=0.0,
            output_kind=RequestOutputKind.CUMULATIVE, detokenize=False,
        )  # fmt: skip
        prompt = [rng.randrange(10, min(4000, args.vocab_size)) for _ in range(args.prompt_len)]
        first = last = 0.0
        n = 0
        async for o in engine.generate({"prompt_token_ids": prompt}, params):
            now = time.perf_counter()
            first = first or now
            last, n = now, len(o.outputs[0].token_ids)
        seen.append((first, last, n))

    async with anyio.create_task_group() as tg:
        for _ in range(batch):
            tg.start_soon(one, seen)
    counts = [n for _, _, n in seen]
    if counts != [args.output_len] * batch:
        raise RuntimeError(f"produced {counts} tokens, not {args.output_len} each")
    window = max(t for _, t, _ in seen) - max(t for t, _, _ in seen)
    return batch * (args.output_len - 1) / window


def _int8_inputs(worker: Any) -> bool:
    """Whether the worker's weight-only linears quantize their inputs to int8 (W4A8, GGUF's
    8-bit blocks; the switchable ones, where a W8A8 checkpoint always does)."""
    return any(getattr(m, "act_int8", False) for m in worker.model_runner.model.modules())


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` in the process environment for the block (the engine runs in this process
    and reads them while it builds the model), the old values back after."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


async def _run(
    models: dict[str, tuple[str, str]],
    batches: list[int],
    kv_bytes: int,
    args: argparse.Namespace,
) -> tuple[dict[str, dict[str, list[float]]], dict[str, dict[str, int]]]:
    """Each round opens every variant's engine in turn (``kv_bytes`` of KV cache), warms
    it, measures it at every batch size and closes it. Returns ({variant: {batch: [rate
    per round]}}, {variant: {"weight_bytes", "kv_blocks", "int8_inputs"}})."""
    rng = random.Random(args.seed)
    runs: dict[str, dict[str, list[float]]] = {v: {str(b): [] for b in batches} for v in models}
    sizes: dict[str, dict[str, int]] = {}
    for r in range(args.rounds):
        for v, (model, load_format) in models.items():
            async with _engine(v, model, load_format, batches, kv_bytes, args) as engine:
                if v not in sizes:
                    sizes[v] = await _sizes(engine)
                for b in batches:
                    runs[v][str(b)].append(await _decode_rate(engine, b, args, rng))
            shown = "  ".join(f"b{b} {x[-1]:8.1f} tok/s" for b, x in runs[v].items())
            print(f"round {r} {v:10s} {shown}", flush=True)
    return runs, sizes


@asynccontextmanager
async def _engine(
    variant: str,
    model: str,
    load_format: str,
    batches: list[int],
    kv_bytes: int,
    args: argparse.Namespace,
) -> AsyncIterator[Any]:
    """``variant``'s engine, warmed up. One at a time: every open engine's worker thread
    keeps an OpenMP team, and with more OpenMP threads than cores libgomp's threads sleep
    at each barrier instead of spinning (worker/omp_spin.py); two engines open in one
    process made a batch-1 decode step of the Qwen3-0.6B shape 1.5x slower (34,286
    voluntary context switches in 64 tokens, against 143 with the engine alone)."""
    from actorllm.core.sampling_params import SamplingParams
    from actorllm.demo import demo_tokenizer_path
    from actorllm.engine import AsyncEngine
    from actorllm.engine.config.engine_config import EngineConfig

    config = EngineConfig(
        model=model, tokenizer=str(demo_tokenizer_path()), load_format=load_format,  # type: ignore[arg-type]
        dtype="bfloat16", max_model_len=args.prompt_len + args.output_len + 8,
        max_num_seqs=max(batches), kv_cache_memory_bytes=kv_bytes, seed=args.seed,
        kv_cache_dtype=_KV_DTYPE.get(variant, "auto"),
    )  # fmt: skip
    with _environment(_ENV.get(variant, {})):
        async with AsyncEngine.open(config) as engine:
            warm = SamplingParams(max_tokens=4, ignore_eos=True, detokenize=False)
            async for _ in engine.generate({"prompt_token_ids": [11, 12, 13, 14]}, warm):
                pass
            yield engine


async def _sizes(engine: Any) -> dict[str, int]:
    """The engine's weight bytes (the runner's count), KV blocks and whether its linears
    take int8 inputs."""
    (weight_bytes,) = await engine.collective_rpc(lambda worker: worker.model_runner.weight_bytes)
    (int8_inputs,) = await engine.collective_rpc(_int8_inputs)
    blocks = (await engine.get_stats()).num_gpu_blocks
    return {"weight_bytes": weight_bytes, "kv_blocks": blocks, "int8_inputs": int8_inputs}


def main(args: argparse.Namespace) -> int:
    from actorllm.bench.machine import result_document, write_json
    from actorllm.kernels.cpu_features import native_int8

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown or "bf16" not in variants:
        raise ValueError(f"--variants: unknown {unknown} or no bf16 baseline (from {VARIANTS})")
    batches = [int(b) for b in args.batches.split(",")]
    shape = model_shape(args)
    models = {v: variant_model(v, shape) for v in variants}
    kv_bytes = kv_budget(shape, batches, args)
    runs, sizes = anyio.run(_run, models, batches, kv_bytes, args, backend="trio")
    rows: dict[str, dict[str, Any]] = {}
    for v in variants:
        med = {b: statistics.median(x) for b, x in runs[v].items()}
        # The ratio of each round's pair (measured seconds apart), then their median.
        ratio = {
            b: statistics.median(q / base for q, base in zip(x, runs["bf16"][b], strict=True))
            for b, x in runs[v].items()
        }
        rows[v] = {"decode_tokens_per_s": med, "ratio_vs_bf16": ratio, "rounds": runs[v],
                   **sizes[v]}  # fmt: skip
        ratios = "  ".join(f"b{b} {x:.2f}x" for b, x in ratio.items())
        mib, blocks = sizes[v]["weight_bytes"] / 2**20, sizes[v]["kv_blocks"]
        print(f"{v:10s} {ratios}  weights {mib:.0f} MiB  KV blocks {blocks}")
    doc = result_document(
        "quant",
        figures=rows,
        config={
            "shape": shape,
            "batches": batches,
            "prompt_len": args.prompt_len,
            "output_len": args.output_len,
            "rounds": args.rounds,
            "kv_cache_memory_bytes": kv_bytes,
            "int8_dot_products": native_int8(),
        },
        args=args,
    )
    if args.output:
        write_json(args.output, doc)
    else:
        print(json.dumps(rows, indent=2))
    return 0
