"""``bench serve --peer vllm``: both servers, vLLM's serving client, interleaved levels.

The whole command runs for real with a stand-in for the peer's Python
(``fake_vllm_server.py``: vLLM's server as the scripted engine, vLLM's client as
actorllm's own); the pieces are checked with plain calls.
"""

from __future__ import annotations

import argparse
import json
import math
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from actorllm.bench import serve, serve_peer
from actorllm.bench.serve_peer import (
    CLIENT_DRIVER,
    FIGURES,
    Workload,
    client_argv,
    compare_levels,
    format_levels,
    run_levels,
)
from actorllm.entrypoints.cli import main


def _fig(tok_s: float, ttft: float) -> dict[str, Any]:
    fig: dict[str, Any] = {k: 10.0 for k in FIGURES}
    fig.update(completed=4, failed=0, output_throughput=tok_s, median_ttft_ms=ttft)
    return fig


def test_levels_parse_and_refuse() -> None:
    assert serve._levels("1,4,16,64") == [1, 4, 16, 64]
    assert serve._levels("8") == [8]
    for bad in ("0", "1,x", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            serve._levels(bad)


def test_the_client_gets_vllms_flags() -> None:
    w = Workload(input_len=256, output_len=128, temperature=0.0, seed=3)
    argv = client_argv(Path("/p/python"), "http://h:1", "m", "/tok", w, 16, Path("/tmp/r/x.json"))
    assert argv[:3] == ["/p/python", "-c", CLIENT_DRIVER]

    def flag(name: str) -> str:
        return argv[argv.index(name) + 1]

    assert (flag("--backend"), flag("--base-url"), flag("--dataset-name")) == (
        "vllm",
        "http://h:1",
        "random",
    )
    assert (flag("--random-input-len"), flag("--random-output-len")) == ("256", "128")
    assert (flag("--max-concurrency"), flag("--num-prompts")) == ("16", "64")  # 4 a stream
    assert flag("--request-rate") == "inf" and "--ignore-eos" in argv
    assert (flag("--result-dir"), flag("--result-filename")) == ("/tmp/r", "x.json")
    assert "--save-detailed" not in argv
    detailed = client_argv(Path("/p"), "http://h:1", "m", "/t", w, 16, Path("/r/x.json"), True)
    assert "--save-detailed" in detailed
    assert Workload(1, 1).prompts_at(1) == 8 and Workload(1, 1, num_prompts=5).prompts_at(64) == 5


def test_medians_and_ratios_per_level() -> None:
    runs = [
        {
            "max_concurrency": 4,
            "num_prompts": 16,
            "runs": {
                "actorllm": [_fig(200, 50), _fig(300, 40), _fig(250, 60)],
                "vllm": [_fig(100, 100), _fig(100, 80), _fig(100, 120)],
            },
        }
    ]
    (row,) = compare_levels(runs)
    assert row["median"]["actorllm"]["output_throughput"] == 250
    assert row["ratios"]["output_throughput"] == pytest.approx(2.5)  # actorllm / vllm
    assert row["ratios"]["median_ttft_ms"] == pytest.approx(2.0)  # vllm / actorllm
    table = format_levels([row])
    assert "max concurrency 4" in table and "2.50x" in table
    assert "ratios" not in compare_levels([{**runs[0], "runs": {"vllm": runs[0]["runs"]["vllm"]}}])


class _Recorded:
    def __init__(self, name: str, events: list[str]) -> None:
        self.name, self.url, self.events = name, f"http://{name}", events

    def pause(self) -> None:
        self.events.append(f"pause {self.name}")

    def resume(self) -> None:
        self.events.append(f"resume {self.name}")


def test_rounds_alternate_and_only_the_measured_server_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []

    async def reset(url: str) -> bool:
        events.append(f"reset {url[7:]}")
        return True

    def client(argv: list[str], env: dict[str, str], out: Path, timeout_s: float) -> Any:
        events.append(f"client {argv[argv.index('--base-url') + 1][7:]}")
        return _fig(1.0, 1.0)

    monkeypatch.setattr(serve_peer, "reset_prefix_cache", reset)
    monkeypatch.setattr(serve_peer, "run_client", client)
    monkeypatch.setattr(serve_peer, "served_model", lambda url: "m")
    monkeypatch.setattr(serve_peer, "gemm_probe_ms", lambda: events.append("probe") or 2.5)
    servers: dict[str, Any] = {n: _Recorded(n, events) for n in ("actorllm", "vllm")}
    levels = run_levels(servers, Path("p"), {}, Workload(8, 4), "tok", [1, 2], rounds=2)
    run = ["probe", "resume {0}", "reset {0}", "client {0}", "pause {0}", "probe"]  # all paused
    a = [e.format("actorllm") for e in run]
    v = [e.format("vllm") for e in run]
    assert events == [
        "resume actorllm", "client actorllm", "pause actorllm",  # warm-up
        "resume vllm", "client vllm", "pause vllm",
        *a, *v, *v, *a,  # level 1: round 2 starts with the other server
        *a, *v, *v, *a,  # level 2
        "resume actorllm", "resume vllm",
    ]  # fmt: skip
    assert [lv["max_concurrency"] for lv in levels] == [1, 2]
    assert all(len(figs) == 2 for lv in levels for figs in lv["runs"].values())
    # each run says how much CPU time the hypervisor took meanwhile (None: not told)
    steals = [f["host_steal"] for lv in levels for figs in lv["runs"].values() for f in figs]
    assert all(s is None or 0.0 <= s <= 1.0 for s in steals) and len(steals) == 8
    # and the host's compute speed just before it
    assert all(f["host_gemm_ms"] == f["host_gemm_ms_after"] == 2.5 for lv in levels
               for figs in lv["runs"].values() for f in figs)  # fmt: skip


def test_peer_vllm_measures_both_servers_with_vllms_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "python"
    script = Path(__file__).with_name("fake_vllm_server.py")
    fake.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(tmp_path / "vllm.json"))
    monkeypatch.setenv("FAKE_VLLM_CLIENT_RECORD", str(tmp_path / "client.jsonl"))
    out = tmp_path / "result.json"
    argv = [
        "bench", "serve", "--peer", "vllm", "--vllm-python", str(fake), "--rounds", "1",
        "--max-concurrency", "1,2", "--num-prompts", "2", "--input-len", "8",
        "--output-len", "4", "--temperature", "0", "--load-format", "dummy",
        "--max-model-len", "128", "--kv-cache-memory-bytes", "1GiB", "--output-json", str(out),
        "--save-detailed", str(tmp_path / "details"),
    ]  # fmt: skip
    assert main(argv) == 0
    kept = sorted(p.name for p in (tmp_path / "details").iterdir())
    assert kept == [f"{s}-c{c}-r0.json" for s in ("actorllm", "vllm") for c in (1, 2)]
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "serve_vs_vllm"
    rows = doc["figures"]["levels"]
    assert [r["max_concurrency"] for r in rows] == [1, 2]
    for row in rows:
        for name in ("actorllm", "vllm"):
            assert row["median"][name]["completed"] == 2 and row["median"][name]["failed"] == 0
        assert math.isfinite(row["ratios"]["output_throughput"])
    calls = [json.loads(line) for line in (tmp_path / "client.jsonl").read_text().splitlines()]
    assert len(calls) == 2 + 4  # a warm-up each, then two levels, two servers, one round
    urls = {c[c.index("--base-url") + 1] for c in calls}
    assert len(urls) == 2 and "--ignore-eos" in calls[0]
    assert doc["config"]["levels"] == [1, 2] and set(doc["config"]["commands"]) == {
        "actorllm",
        "vllm",
    }


def test_peer_refuses_what_it_cannot_honour(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "serve", "--peer", "vllm", "--base-url", "http://127.0.0.1:1"]) != 0
    assert "--peer starts both servers itself" in capsys.readouterr().out
    url = ["--base-url", "http://127.0.0.1:1"]
    assert main(["bench", "serve", "--max-concurrency", "1,4", *url]) != 0
    assert "--max-concurrency takes one level" in capsys.readouterr().out
    assert main(["bench", "serve", "--save-detailed", "/tmp/d", *url]) != 0
    assert "--save-detailed keeps vLLM's client's records: it goes with --peer" in (
        capsys.readouterr().out
    )
