"""``actorllm bench chaos`` on tiny settings: the JSON document and the exit status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from actorllm.bench.chaos import parse_points
from actorllm.entrypoints.cli import main
from actorllm.testing.chaos_plan import CrashPoint

TINY = ["--requests-per-batch", "4", "--workloads", "2", "--max-tokens", "8"]


def test_chaos_on_both_backends_writes_the_figures(tmp_path: Path, capsys) -> None:
    out = tmp_path / "chaos.json"
    argv = ["bench", "chaos", "--crashes", "4", "--backend", "both", *TINY]
    assert main([*argv, "--fail-on-failed", "--output-json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "chaos" and doc["config"]["model"] == "scripted"
    for backend in ("trio", "asyncio"):
        fig = doc["figures"][backend]
        assert fig["backend"] == backend and fig["crashes"] == 4
        assert fig["outcomes"]["identical"] == fig["requests"] == 4 * fig["batches"]
        assert fig["invariants"]["violations"] == 0 and fig["ok"]
        assert fig["latency_s"]["without_faults"]["count"] == 8
        assert sum(fig["restarts"].values()) >= 4
    table = capsys.readouterr().out
    assert "identical" in table and "trio" in table and "asyncio" in table


def test_scripted_points_from_the_command_line(tmp_path: Path) -> None:
    out = tmp_path / "chaos.json"
    argv = ["bench", "chaos", "--backend", "trio", "--points", "scheduler@2@0,router@1@1"]
    assert main([*argv, *TINY, "--output-json", str(out)]) == 0
    fig = json.loads(out.read_text())["figures"]["trio"]
    assert fig["crashes_by_actor"] == {"router": 1, "scheduler": 1}


def test_point_syntax() -> None:
    assert parse_points("worker, scheduler@3, router@2@5") == [
        CrashPoint("worker"),
        CrashPoint("scheduler", 3),
        CrashPoint("router", 2, 5),
    ]
    with pytest.raises(ValueError, match="unknown actor"):
        parse_points("gpu@1")


def test_unknown_actor_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "chaos", "--actors", "router,gpu"])
    assert exc.value.code == 2
    assert "gpu" in capsys.readouterr().err


def test_hang_points_parse() -> None:
    assert parse_points("router@2@1:hang") == [CrashPoint("router", 2, 1, hang=True)]
    with pytest.raises(ValueError, match="fault kind"):
        parse_points("router@2:stall")


def test_chaos_on_a_real_tiny_model(tmp_path: Path) -> None:
    """A real model through --model: crashes outside the core (no recompute, so the float
    batch composition of a replay cannot change a token)."""
    import shutil

    from actorllm.demo import demo_tokenizer_path
    from tests.helpers.models import make_tiny_checkpoint

    model = make_tiny_checkpoint(
        tmp_path / "tiny", "llama", vocab_size=4096, eos_token_id=0, max_position_embeddings=512
    )
    for f in demo_tokenizer_path().iterdir():
        shutil.copy(f, model / f.name)
    out = tmp_path / "chaos.json"
    argv = ["bench", "chaos", "--model", str(model), "--backend", "trio", "--crashes", "3"]
    argv += ["--actors", "router,input_processor,output_processor", *TINY]
    assert main([*argv, "--fail-on-failed", "--output-json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["config"]["model"] == str(model)
    fig = doc["figures"]["trio"]
    assert fig["crashes"] == 3 and fig["outcomes"]["identical"] == fig["requests"]


def test_embedding_prompts_replay_after_core_crashes(tmp_path: Path) -> None:
    """--prompt-embeds on a real tiny model in float32 (the default with --model): half the
    prompts are embedding rows, the scheduler and the worker crash, and every request
    (recomputed from the ledger's rows) ends identical to the fault-free run."""
    import shutil

    from actorllm.demo import demo_tokenizer_path
    from tests.helpers.models import make_tiny_checkpoint

    model = make_tiny_checkpoint(
        tmp_path / "tiny", "llama", vocab_size=4096, eos_token_id=0, max_position_embeddings=512
    )
    for f in demo_tokenizer_path().iterdir():
        shutil.copy(f, model / f.name)
    out = tmp_path / "chaos.json"
    argv = ["bench", "chaos", "--model", str(model), "--backend", "trio", "--prompt-embeds"]
    argv += ["--points", "worker@2@0,scheduler@3@1,worker@5@2,executor@4@3", *TINY]
    assert main([*argv, "--fail-on-failed", "--output-json", str(out)]) == 0
    fig = json.loads(out.read_text())["figures"]["trio"]
    assert fig["crashes"] == 4 and fig["outcomes"]["identical"] == fig["requests"] == 16


def test_model_settings_without_a_model_are_refused() -> None:
    """--tokenizer (like --kv-cache-dtype) names a real model's setting: the scripted model
    has none to take."""
    for flag, value in (("--tokenizer", "some/dir"), ("--kv-cache-dtype", "fp8")):
        with pytest.raises(SystemExit, match=f"{flag} needs --model"):
            main(["bench", "chaos", flag, value, "--crashes", "1"])


def test_pooling_flags_that_make_no_sense_are_refused() -> None:
    """--pooling needs a pooling model and takes none of generation's request paths; the
    error names the flags."""
    with pytest.raises(SystemExit, match="--pooling needs --model"):
        main(["bench", "chaos", "--pooling", "--crashes", "1"])
    cases = [
        (["--lora", "2"], "--lora"),
        (["--speculative-config", '{"method": "ngram"}'], "--speculative-config"),
        (["--prompt-embeds", "--lora", "1"], "--lora, --prompt-embeds"),
    ]
    for flags, named in cases:
        argv = ["bench", "chaos", "--pooling", "--model", "some/dir", *flags]
        with pytest.raises(SystemExit, match=f"--pooling does not combine with {named}"):
            main(argv)
    with pytest.raises(SystemExit, match="--convert needs --pooling"):
        main(["bench", "chaos", "--convert", "embed", "--model", "some/dir"])


def test_pooling_on_a_chunked_decoder_embedder(tmp_path: Path) -> None:
    """--pooling --convert embed on a tiny random Qwen3, its prompts chunked by a small step
    budget (the worker keeps earlier chunks' rows): crashes of the core and the output
    processor change no pooled result (token_embed rows included) and leak no KV block."""
    import shutil

    from actorllm.demo import demo_tokenizer_path
    from tests.helpers.models import make_tiny_checkpoint

    model = make_tiny_checkpoint(tmp_path / "qwen3", "qwen3", vocab_size=4096)
    for f in demo_tokenizer_path().iterdir():
        shutil.copy(f, model / f.name)
    out = tmp_path / "chaos.json"
    argv = ["bench", "chaos", "--pooling", "--convert", "embed", "--model", str(model)]
    argv += ["--backend", "trio", "--max-num-batched-tokens", "24", "--max-num-seqs", "4"]
    argv += ["--points", "worker@2@0,output_processor@3@0,scheduler@3@1,executor@2@1", *TINY]
    assert main([*argv, "--fail-on-failed", "--output-json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["config"]["requests"] == "pooling"
    fig = doc["figures"]["trio"]
    assert fig["crashes"] == 4 and fig["outcomes"]["identical"] == fig["requests"] == 8
    assert fig["invariants"]["violations"] == 0
