"""``actorllm bench quant`` end to end on a tiny shape: every row measured, ratios against
the bf16 row of the same run, the machine named."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from actorllm.bench import quant


def test_bench_quant_writes_rows_with_ratios(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("actorllm.demo.model.cache_dir", lambda: tmp_path / "cache")
    parser = argparse.ArgumentParser()
    quant.add_arguments(parser)
    out = tmp_path / "quant.json"
    args = parser.parse_args([
        "--hidden-size", "128", "--layers", "1", "--heads", "4", "--kv-heads", "2",
        "--head-dim", "32", "--intermediate-size", "256", "--vocab-size", "512",
        "--variants", "bf16,gguf-q4_0,w8a8,gptq4,gptq4-w4a16,gguf-q8_0,gguf-q8_0-a16,bf16-fp8kv",
        "--batches", "1,2", "--rounds", "1",
        "--prompt-len", "4", "--output-len", "4", "--output", str(out),
    ])  # fmt: skip
    assert quant.main(args) == 0
    doc = json.loads(out.read_text())
    assert doc["machine"]["cpu_model"] and "isa" in doc["machine"]
    rows = doc["figures"]
    assert set(rows) == {
        "bf16", "gguf-q4_0", "w8a8", "gptq4", "gptq4-w4a16", "gguf-q8_0", "gguf-q8_0-a16",
        "bf16-fp8kv",
    }  # fmt: skip
    assert rows["bf16"]["ratio_vs_bf16"] == {"1": 1.0, "2": 1.0}
    for row in rows.values():
        assert all(rate > 0 for rate in row["decode_tokens_per_s"].values())
    assert rows["gguf-q4_0"]["weight_bytes"] < rows["bf16"]["weight_bytes"]
    # The same KV budget buys an fp8 cache twice the blocks (the null block aside).
    assert rows["bf16-fp8kv"]["kv_blocks"] + 1 == 2 * (rows["bf16"]["kv_blocks"] + 1)
    assert rows["bf16-fp8kv"]["weight_bytes"] == rows["bf16"]["weight_bytes"]
    # 4-bit rows and GGUF's 8-bit blocks quantize their inputs to int8 unless told not to
    # (VLLM_CPU_INT4_W4A8=0, ACTORLLM_CPU_GGUF_A8=0).
    for a8, a16 in (("gptq4", "gptq4-w4a16"), ("gguf-q8_0", "gguf-q8_0-a16")):
        assert rows[a8]["int8_inputs"] and not rows[a16]["int8_inputs"]
        assert rows[a16]["weight_bytes"] == rows[a8]["weight_bytes"]


def test_unknown_variants_and_a_missing_baseline_are_refused() -> None:
    parser = argparse.ArgumentParser()
    quant.add_arguments(parser)
    with pytest.raises(ValueError, match="--variants"):
        quant.main(parser.parse_args(["--variants", "gptq4"]))


def test_the_q4_k_m_file_mixes_types_as_llama_cpp_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gguf-q4_k_m``: Q4_K, with attn_v, ffn_down and the (tied) head in Q6_K."""
    import gguf

    monkeypatch.setattr("actorllm.demo.model.cache_dir", lambda: tmp_path)
    parser = argparse.ArgumentParser()
    quant.add_arguments(parser)
    args = parser.parse_args([
        "--hidden-size", "256", "--layers", "1", "--heads", "2", "--kv-heads", "2",
        "--head-dim", "128", "--intermediate-size", "512", "--vocab-size", "64",
    ])  # fmt: skip
    path, _ = quant.variant_model("gguf-q4_k_m", quant.model_shape(args))
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(path).tensors}
    assert types["blk.0.attn_q.weight"] == types["blk.0.ffn_up.weight"] == "Q4_K"
    assert types["blk.0.attn_v.weight"] == types["blk.0.ffn_down.weight"] == "Q6_K"
    assert types["token_embd.weight"] == "Q6_K"


def test_the_kv_budget_holds_every_request_of_the_largest_batch() -> None:
    """At Qwen3-0.6B's 28 layers a fixed 64 MiB held 17 blocks: batch 64 measured requests
    waiting for KV, not decode. The budget now holds the largest batch in a bf16 cache."""
    parser = argparse.ArgumentParser()
    quant.add_arguments(parser)
    args = parser.parse_args(["--layers", "28", "--vocab-size", "151936", "--batches", "1,8,64"])
    shape = quant.model_shape(args)
    per_token = 2 * 28 * shape["num_key_value_heads"] * shape["head_dim"] * 2
    budget = quant.kv_budget(shape, [1, 8, 64], args)
    blocks_per_request = -(-(args.prompt_len + args.output_len) // 16)
    assert budget // (16 * per_token) >= 64 * (blocks_per_request + 1)
    assert budget % 2**20 == 0
    tiny = parser.parse_args(["--layers", "1", "--batches", "1,2"])
    assert quant.kv_budget(quant.model_shape(tiny), [1, 2], tiny) == 64 * 2**20
