"""``actorllm bench embed`` on a handful of texts: both sides run on the same texts, every
vector is checked against sentence-transformers', and the result document names the
machine."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from actorllm.bench import embed


def test_a_small_run_writes_both_rates_and_the_machine(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    embed.add_arguments(parser)
    out = tmp_path / "embed.json"
    args = parser.parse_args(
        ["--num-texts", "8", "--max-tokens", "24", "--st-batch-sizes", "4", "--output", str(out)]
    )
    assert embed.main(args) == 0
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "embed" and doc["machine"]["cpu_count"] >= 1
    figures = doc["figures"]
    assert figures["num_texts"] == 8 and figures["st_best_batch_size"] == 4
    assert figures["actorllm_texts_per_s"] > 0 and figures["st_texts_per_s"] > 0
    assert figures["min_cosine_vs_st"] > 0.9999
