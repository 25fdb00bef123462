"""``bench serve`` against several servers: interleaved rounds, medians and ratios, and the
vLLM server's command line (a stand-in server plays vLLM: no vLLM needed here)."""

from __future__ import annotations

import argparse
import json
import math
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actorllm.bench import serve
from actorllm.bench.datasets import BenchRequest
from actorllm.bench.serve_compare import compare, format_compare, medians, run_rounds
from actorllm.bench.vllm_peer import PeerUnavailableError
from actorllm.bench.vllm_server import (
    MIRRORED,
    actorllm_only,
    peer_kv_cache_bytes,
    vllm_serve_argv,
)
from actorllm.engine.config.engine_config import EngineConfig
from actorllm.entrypoints.cli import main
from actorllm.entrypoints.openai.app import AppSettings, build_app
from actorllm.testing.engine_harness import open_test_engine
from tests.entrypoints.server_thread import ServerThread


def _fig(tok_s: float, ttft: float, tpot: float = 10.0) -> dict[str, Any]:
    def stats(median: float) -> dict[str, float]:
        return {"median": median, "p99": 2 * median}

    return {
        "output_tokens_per_s": tok_s,
        "requests_per_s": tok_s / 100,
        "total_tokens_per_s": 2 * tok_s,
        "ttft_ms": stats(ttft),
        "tpot_ms": stats(tpot),
        "itl_ms": stats(tpot),
        "e2el_ms": stats(ttft + 100 * tpot),
    }


def test_medians_and_ratios_point_the_same_way() -> None:
    rounds = {
        "actorllm": [_fig(300, 50), _fig(100, 70), _fig(200, 60)],
        "vllm": [_fig(100, 120), _fig(150, 100), _fig(50, 140)],
    }
    assert medians(rounds["actorllm"])["output_tokens_per_s"] == 200
    assert medians(rounds["actorllm"])["ttft_ms_median"] == 60
    doc = compare(rounds)
    assert doc["backends"]["vllm"]["rounds"] == rounds["vllm"]
    r = doc["ratios"]
    assert r["output_tokens_per_s"] == pytest.approx(2.0)  # throughput: actorllm / vllm
    assert r["ttft_ms_median"] == pytest.approx(2.0)  # latency: vllm / actorllm
    assert r["tpot_ms_median"] == pytest.approx(1.0)
    table = format_compare(doc)
    assert "actorllm" in table and "vllm" in table and "2.00x" in table
    # one server: no ratio; a line without samples (NaN) gets none either
    assert "ratios" not in compare({"actorllm": rounds["actorllm"]})
    nan = _fig(100, math.nan)
    assert "ttft_ms_median" not in compare({"actorllm": [nan], "vllm": [nan]})["ratios"]


class _Recorded:
    """A server the test started, whose pauses and resumes are recorded."""

    def __init__(self, name: str, url: str, events: list[str]) -> None:
        self.name, self.url, self.events = name, url, events

    def pause(self) -> None:
        self.events.append(f"pause {self.name}")

    def resume(self) -> None:
        self.events.append(f"resume {self.name}")


@pytest.fixture
def dev_server() -> Iterator[ServerThread]:
    settings = AppSettings(log_interval_s=0, dev_mode=True)
    srv = ServerThread(build_app(lambda: open_test_engine(), settings)).start()
    yield srv
    srv.stop()
    assert srv.error is None


def test_rounds_interleave_and_only_the_measured_server_runs(dev_server: ServerThread) -> None:
    events: list[str] = []
    servers: dict[str, Any] = {n: _Recorded(n, dev_server.url, events) for n in ("a", "b")}
    reqs = [BenchRequest([1, 2, 3, 4], 4), BenchRequest([5, 6, 7], 3)]
    rounds = run_rounds(servers, reqs, 2, warmup=1, temperature=0.0)
    assert events == [
        "pause a", "pause b",
        "resume a", "pause a", "resume b", "pause b",  # warm-up
        "resume a", "pause a", "resume b", "pause b",  # round 1
        "resume a", "pause a", "resume b", "pause b",  # round 2
        "resume a", "resume b",  # left running for the caller to stop
    ]  # fmt: skip
    for figs in rounds.values():
        assert len(figs) == 2
        for f in figs:
            assert (f["completed"], f["failed"], f["output_tokens"]) == (2, 0, 7)
            assert f["prefix_cache_reset"] is True  # dev mode: every round from a cold cache


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(conflict_handler="resolve")  # as `actorllm bench`
    serve.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_plan_refuses_what_it_cannot_honour() -> None:
    assert serve._plan(_args()) == (("actorllm",), False)
    assert serve._plan(_args("--backend", "both")) == (("actorllm", "vllm"), True)
    assert serve._plan(_args("--backend", "vllm")) == (("vllm",), True)
    with pytest.raises(ValueError, match="--base-url measures a running server, --backend both"):
        serve._plan(_args("--backend", "both", "--base-url", "http://127.0.0.1:1"))
    with pytest.raises(ValueError, match=r"--base-url .* --launch starts its own"):
        serve._plan(_args("--launch", "--base-url", "http://127.0.0.1:1"))
    with pytest.raises(ValueError, match="--worker-class sets the server this command starts"):
        serve._plan(_args("--worker-class", "asyncio"))
    with pytest.raises(ValueError, match="--rounds 0"):
        serve._plan(_args("--rounds", "0"))
    with pytest.raises(ValueError, match="--backend: unknown hf"):
        serve._plan(_args("--backend", "actorllm,hf"))


def test_vllm_gets_actorllms_resolved_settings(tmp_path: Path) -> None:
    cfg = EngineConfig(
        device="cpu", load_format="dummy", max_num_seqs=64, seed=7, enable_prefix_caching=False
    )
    argv = vllm_serve_argv(Path("/venv/bin/python"), cfg, "bfloat16", 8123)
    assert argv[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]

    def flag(name: str) -> str:
        return argv[argv.index(name) + 1]

    assert flag("--model") == str(cfg.resolved_model())
    assert (flag("--host"), flag("--port"), flag("--dtype")) == ("127.0.0.1", "8123", "bfloat16")
    assert (flag("--load-format"), flag("--seed"), flag("--max-num-seqs")) == ("dummy", "7", "64")
    max_len = json.loads((Path(cfg.resolved_model()) / "config.json").read_text())[
        "max_position_embeddings"
    ]
    assert flag("--max-model-len") == str(max_len)
    assert flag("--max-num-batched-tokens") == str(cfg.resolved_max_num_batched_tokens(max_len))
    assert "--no-enable-prefix-caching" in argv and "--enable-chunked-prefill" in argv
    assert "--async-scheduling" in argv  # actorllm's resolved default, said explicitly
    assert "--no-async-scheduling" in vllm_serve_argv(
        Path("p"), cfg.replace(async_scheduling=False), "float32", 1
    )
    assert actorllm_only({"block_size": 32, "max_num_seqs": 8, "model": "m"}) == ["block_size"]
    assert set(MIRRORED) <= set(EngineConfig.__struct_fields__)  # every name a real field
    assert peer_kv_cache_bytes(cfg) == 2 * 2**30
    assert peer_kv_cache_bytes(cfg.replace(kv_cache_memory_bytes=3 * 2**30)) == 3 * 2**30
    with pytest.raises(ValueError, match=r"--kv-cache-memory-bytes .* whole GiB"):
        peer_kv_cache_bytes(cfg.replace(kv_cache_memory_bytes=2**29))


def test_missing_vllm_env_names_the_setup_script(tmp_path: Path) -> None:
    with pytest.raises(PeerUnavailableError, match=r"setup_vllm_cpu\.sh"):
        main(["bench", "serve", "--backend", "vllm", "--vllm-python", str(tmp_path / "python")])


def test_both_servers_launched_side_by_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole command: `actorllm serve` started for real, a stand-in for vLLM's server
    started from a fake "vllm python", two interleaved rounds, the JSON with both."""
    fake = tmp_path / "python"
    script = Path(__file__).with_name("fake_vllm_server.py")
    fake.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    record = tmp_path / "vllm.json"
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(record))
    out = tmp_path / "result.json"
    argv = [
        "bench", "serve", "--backend", "both", "--rounds", "2", "--vllm-python", str(fake),
        "--load-format", "dummy", "--max-model-len", "128", "--num-prompts", "3",
        "--input-len", "8", "--output-len", "4", "--temperature", "0",
        "--worker-class", "asyncio", "--kv-cache-memory-bytes", "1GiB",
        "--output-json", str(out),
    ]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    fig = doc["figures"]
    for name in ("actorllm", "vllm"):
        rounds = fig["backends"][name]["rounds"]
        counts = [(r["completed"], r["failed"], r["output_tokens"]) for r in rounds]
        assert counts == [(3, 0, 12)] * 2
        assert all(r["prefix_cache_reset"] for r in rounds)
    assert fig["ratios"]["output_tokens_per_s"] > 0
    config = doc["config"]
    assert (config["backends"], config["rounds"], config["base_url"]) == (
        ["actorllm", "vllm"],
        2,
        "launched",
    )
    # both got the same KV cache bytes; vLLM got actorllm's settings and its environment
    actorllm_cmd = config["commands"]["actorllm"]
    assert actorllm_cmd[actorllm_cmd.index("--worker-class") + 1] == "asyncio"
    assert actorllm_cmd[actorllm_cmd.index("--kv-cache-memory-bytes") + 1] == str(2**30)
    seen = json.loads(record.read_text())
    assert config["commands"]["vllm"][1:] == seen["argv"]  # the command line it really ran
    assert seen["argv"][seen["argv"].index("--max-model-len") + 1] == "128"
    assert seen["env"]["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert seen["env"]["VLLM_SERVER_DEV_MODE"] == "1"
    assert "VLLM_CPU_OMP_THREADS_BIND" in seen["env"] and "PYTHONPATH" not in seen["env"]


def test_a_server_without_dev_mode_is_measured_and_the_missed_reset_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    srv = ServerThread(build_app(lambda: open_test_engine(), AppSettings(log_interval_s=0)))
    srv.start()
    try:
        with caplog.at_level("WARNING", logger="actorllm.bench.serve_compare"):
            rounds = run_rounds(
                {"actorllm": _Recorded("a", srv.url, [])},
                [BenchRequest([1, 2, 3], 3)],
                1,
                warmup=0,
                temperature=0.0,
            )
    finally:
        srv.stop()
    (fig,) = rounds["actorllm"]
    assert fig["completed"] == 1 and fig["prefix_cache_reset"] is False
    assert "could not reset the prefix cache" in caplog.text
