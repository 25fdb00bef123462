"""Pooling requests in a chaos soak: a seeded workload of embeddings, per-token embeddings,
classifications and cross-encoder scores. The soak sends them through
``AsyncEngine.encode`` and compares each result bit for bit with the reference run's
(:class:`~actorllm.testing.chaos_report.PooledSignature`).

    workloads = await pooling_workloads(open_engine, 32, count=2, seed=1)
    report = await chaos_soak(open_engine, workloads, crashes=20)
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from typing import Any

from actorllm.core.pooling_params import PoolingParams
from actorllm.engine.api.pooling_requests import pair_prompt as tokenize_pair
from actorllm.testing.chaos import ChaosRequest, EngineOpener

# The tasks a soak sends, when the model offers them.
SOAK_TASKS = ("embed", "token_embed", "classify", "token_classify")

_WORDS = ("the", "engine", "pools", "every", "token", "of", "a", "short", "or", "long",
          "text", "into", "one", "vector", "while", "actors", "crash", "and", "restart",
          "ledger", "replays", "what", "was", "in", "flight")  # fmt: skip


def _text(rng: random.Random) -> str:
    """1-24 words mostly, 40-120 words one time in five."""
    n = rng.randint(40, 120) if rng.random() < 0.2 else rng.randint(1, 24)
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def pooling_workload(
    n: int,
    *,
    seed: int = 0,
    tasks: Sequence[str] = ("embed",),
    pair_prompt: Any = None,
) -> list[ChaosRequest]:
    """``n`` pooling requests over the model's ``tasks`` in turn (those of
    :data:`SOAK_TASKS`), texts of mixed lengths fixed by ``seed``; every third embedding
    without its activation (unnormalized). ``pair_prompt`` (a cross-encoder's
    ``(query, document) -> (prompt, token_type_start)``, ``pooling_requests.pair_prompt``
    bound to its tokenizer) makes every fourth classification a score of a pair."""
    chosen = [t for t in tasks if t in SOAK_TASKS]
    if not chosen:
        raise ValueError(f"the model offers none of the soak's tasks {SOAK_TASKS}: {tasks}")
    rng = random.Random(seed)
    out = []
    embeds = 0
    for i in range(n):
        task = chosen[i % len(chosen)]
        prompt: Any = _text(rng)
        params = PoolingParams(task=task)  # type: ignore[arg-type]
        if task == "embed":
            if embeds % 3 == 1:  # every third embedding, the second first
                params = params.clone(use_activation=False)
            embeds += 1
        if task == "classify" and pair_prompt is not None and i % 4 == 3:
            prompt, start = pair_prompt(prompt, _text(rng))
            params = params.clone(token_type_start=start)
        out.append(ChaosRequest(f"p{i}-{task}", prompt, params))
    return out


async def pooling_workloads(
    open_engine: EngineOpener, n: int, *, count: int = 1, seed: int = 0
) -> list[list[ChaosRequest]]:
    """``count`` workloads of ``n`` requests (seeds ``seed``, ``seed + 1``, ...) over the
    tasks the engine's model offers, with scores of pairs where it is a cross-encoder.
    Opens one engine to read them; raises ``ValueError`` for a text-generation model."""
    async with open_engine() as engine:
        pm, tokenizer = engine.pooling_model, engine.tokenizer
        name = engine.config.model_name()
    if pm is None:
        raise ValueError(f"{name!r} is a text-generation model: a pooling soak needs a pooling one")
    pair = functools.partial(tokenize_pair, tokenizer) if pm.is_cross_encoder else None
    return [
        pooling_workload(n, seed=seed + i, tasks=pm.tasks, pair_prompt=pair) for i in range(count)
    ]
