"""``actorllm bench embed`` on a handful of texts: every side runs on the same texts, every
vector is checked against sentence-transformers' float32 one, and the result document
names the machine and each side's dtype."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from actorllm.bench import embed
from actorllm.bench.vllm_peer import PeerUnavailableError


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    embed.add_arguments(parser)
    return parser.parse_args(["--num-texts", "8", "--max-tokens", "24", *argv])


def test_a_small_run_writes_every_rate_and_the_machine(tmp_path: Path) -> None:
    out = tmp_path / "embed.json"
    args = _args("--dtype", "float32", "--st-batch-sizes", "4", "--st-dtypes", "float32,bfloat16",
                 "--output", str(out))  # fmt: skip
    assert embed.main(args) == 0
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "embed" and doc["machine"]["cpu_count"] >= 1
    figures = doc["figures"]
    assert figures["num_texts"] == 8
    assert figures["actorllm"]["dtype"] == "float32" and figures["actorllm"]["texts_per_s"] > 0
    assert [r["dtype"] for r in figures["sentence_transformers"]] == ["float32", "bfloat16"]
    assert all(r["best_batch_size"] == 4 for r in figures["sentence_transformers"])
    assert set(figures["ratios"]) == {
        "vs_sentence_transformers_float32", "vs_sentence_transformers_bfloat16"
    }  # fmt: skip
    assert figures["actorllm"]["min_cosine_vs_st_float32"] > 0.9999
    assert all(
        side["host_gemm_ms"] > 0
        for side in [figures["actorllm"], *figures["sentence_transformers"]]
    )


def test_a_missing_vllm_environment_is_named_before_anything_runs(tmp_path: Path) -> None:
    args = _args("--peer", "vllm", "--vllm-python", str(tmp_path / "nope" / "python"))
    with pytest.raises(PeerUnavailableError, match="nope"):
        embed.main(args)


def test_a_failed_vllm_run_reports_its_output(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text(f"#!{sys.executable}\nimport sys\nprint('no vllm here', file=sys.stderr)\n"
                    "sys.exit(3)\n")  # fmt: skip
    fake.chmod(0o755)
    with pytest.raises(PeerUnavailableError, match="exit 3"):
        embed._vllm_run(fake, "m", "bfloat16", ["a text"], _args())
