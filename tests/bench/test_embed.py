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


def test_rounds_interleave_the_sides_and_ratios_pair_each_round(tmp_path: Path) -> None:
    """``--rounds 2``: our side and vLLM's in turn twice; the vLLM ratio is the median
    round's own (both sides back to back), every round recorded. vLLM is a stand-in
    script here that answers like vllm_embed_runner.py."""
    fake = tmp_path / "python"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, sys, numpy as np\n"
        "job = json.load(open(sys.argv[-1]))\n"
        "np.save(job['vectors'], np.ones((len(job['texts']), 384), dtype=np.float32))\n"
        "print(json.dumps({'elapsed_s': 1.0, 'texts_per_s': 1000.0, 'dtype': job['dtype']}))\n"
    )  # fmt: skip
    fake.chmod(0o755)
    out = tmp_path / "embed.json"
    args = _args("--dtype", "float32", "--no-st", "--peer", "vllm", "--vllm-python", str(fake),
                 "--vllm-dtypes", "same", "--rounds", "2", "--output", str(out))  # fmt: skip
    assert embed.main(args) == 0
    figures = json.loads(out.read_text())["figures"]
    assert figures["rounds"] == 2 and len(figures["actorllm"]["rounds"]) == 2
    (peer,) = figures["vllm"]
    assert len(peer["rounds"]) == 2 and peer["dtype_asked"] == "float32"
    ours = [r["texts_per_s"] for r in figures["actorllm"]["rounds"]]
    paired = [o / r["texts_per_s"] for o, r in zip(ours, peer["rounds"], strict=True)]
    assert [r["ratio"] for r in peer["rounds"]] == paired
    assert figures["ratios"]["vs_vllm_float32"] == min(r["ratio"] for r in peer["rounds"])
