"""``actorllm run-batch``: vLLM's flags, files in and out, stdin/stdout with ``-``, URLs
refused by name; on the demo model, a completion's text equals the HTTP server's."""

from __future__ import annotations

import io
import json
import logging
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from actorllm.engine import AsyncEngine
from actorllm.engine.config.engine_config import EngineConfig
from actorllm.entrypoints import cli
from actorllm.entrypoints.commands.run_batch import (
    _batch,
    line_limit,
    local_path,
    metrics_at,
    output_writer,
)
from actorllm.entrypoints.openai.app import AppSettings, build_app
from tests.entrypoints.server_thread import ServerThread

DEMO = ["--max-model-len", "256", "--log-interval", "0"]
COMPLETION = {
    "model": "actorllm-demo",
    "prompt": "Once upon a time",
    "max_tokens": 5,
    "temperature": 0,
}
CHAT = {"model": "actorllm-demo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


def line(custom_id: str, url: str, body: Any) -> str:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


BATCH = "\n".join(
    [
        line("chat", "/v1/chat/completions", CHAT),
        line("cmpl", "/v1/completions", COMPLETION),
        "this line is not JSON",
        line("embed", "/v1/embeddings", {"model": "actorllm-demo", "input": "x"}),
        line("long", "/v1/completions", {**COMPLETION, "max_tokens": 1000}),
    ]
)


def test_vllm_run_batch_flags_parse() -> None:
    args = cli.build_parser().parse_args(
        ["run-batch", "-i", "in.jsonl", "-o", "out.jsonl", "--model", "m", "--max-num-seqs", "4",
         "--output-tmp-dir", "/tmp", "--response-role", "bot", "--max-log-len", "10",
         "--enable-force-include-usage", "--enable-prompt-tokens-details", "--enable-metrics",
         "--url", "0.0.0.0", "--port", "8001", "--disable-log-requests", "--disable-log-stats",
         "--tool-call-parser", "hermes", "--enable-auto-tool-choice", "--chat-template", "x"]
    )  # fmt: skip
    assert (args.input_file, args.output_file, args.output_tmp_dir) == (
        "in.jsonl",
        "out.jsonl",
        "/tmp",
    )
    assert args.response_role == "bot" and args.max_log_len == 10
    assert args.enable_force_include_usage and args.log_interval_s == 0.0


def test_the_metrics_endpoint_flags_are_vllms() -> None:
    def at(*flags: str) -> tuple[str, int] | None:
        return metrics_at(
            cli.build_parser().parse_args(["run-batch", "-i", "-", "-o", "-", *flags])
        )

    assert at() is None
    assert at("--enable-metrics") == ("0.0.0.0", 8000)
    assert at("--enable-metrics", "--url", "10.0.0.1", "--port", "9") == ("10.0.0.1", 9)
    assert at("--enable-metrics", "--url", "10.0.0.1", "--host", "::1") == ("::1", 8000)


def test_enable_metrics_serves_them_while_the_batch_runs() -> None:
    """As vLLM's test_metrics_exist_run_batch: the endpoint answers during the run (each
    output line is written after a scrape, on any path), and is gone after it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    scrapes: list[httpx.Response] = []

    def write(data: bytes) -> None:  # on the event loop: the endpoint's thread answers
        scrapes.append(httpx.get(url + ("/metrics" if scrapes else "/"), timeout=10))

    lines = [line(f"c{i}", "/v1/completions", COMPLETION).encode() for i in range(2)]
    settings = AppSettings(log_interval_s=0, metrics_prefix="vllm")
    config = EngineConfig(max_model_len=256)
    summary = anyio.run(_batch, config, settings, lines, write, ("127.0.0.1", port))
    assert summary.lines == 2 and [r.status_code for r in scrapes] == [200, 200]
    assert all("vllm:num_requests_running{" in r.text for r in scrapes)
    with pytest.raises(httpx.ConnectError):
        httpx.get(url, timeout=2)


def test_lines_in_flight_follow_the_engine_admission() -> None:
    assert line_limit(EngineConfig(max_num_seqs=8)) == 16  # vLLM's 2 x max_num_seqs
    assert line_limit(EngineConfig(max_num_seqs=8, data_parallel_size=2)) == 32
    assert line_limit(EngineConfig(max_num_seqs=8, max_waiting_requests=3)) == 11


def test_dash_is_stdin_and_stdout() -> None:
    args = cli.build_parser().parse_args(["run-batch", "-i", "-", "-o", "-"])
    assert (args.input_file, args.output_file) == ("-", "-")


def test_local_paths_and_urls() -> None:
    assert local_path("-", "--input-file") == "-"
    assert local_path("data/in.jsonl", "--input-file") == "data/in.jsonl"
    assert local_path("file:///tmp/my%20in.jsonl", "--input-file") == "/tmp/my in.jsonl"
    with pytest.raises(ValueError, match=r"--output-file https://x/o.jsonl: https:// URLs"):
        local_path("https://x/o.jsonl", "--output-file")


def test_a_url_or_a_missing_file_stops_before_the_model_loads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    out = tmp_path / "out.jsonl"
    assert cli.main(["run-batch", "-i", "http://host/in.jsonl", "-o", str(out)]) == 2
    assert "http:// URLs are not supported" in caplog.text
    assert cli.main(["run-batch", "-i", str(tmp_path / "missing.jsonl"), "-o", str(out)]) == 2
    assert "cannot read --input-file" in caplog.text
    assert not out.exists()


@pytest.fixture(scope="module")
def real() -> Iterator[ServerThread]:
    app = build_app(
        lambda: AsyncEngine.open(None, max_model_len=256), AppSettings(log_interval_s=0)
    )
    srv = ServerThread(app).start(timeout_s=240)
    yield srv
    srv.stop()
    assert srv.error is None


def check(outputs: list[dict[str, Any]], server: ServerThread) -> None:
    assert [o["custom_id"] for o in outputs] == ["chat", "cmpl", None, "embed", "long"]
    assert [o["response"]["status_code"] for o in outputs] == [200, 200, 400, 400, 400]
    chat, cmpl, _, embed, long = outputs
    assert embed["error"]["error"]["param"] == "model"  # the demo model generates: no embeddings
    assert chat["response"]["body"]["choices"][0]["message"]["role"] == "assistant"
    http = httpx.post(server.url + "/v1/completions", json=COMPLETION, timeout=60)
    assert http.status_code == 200
    # Greedy on the same weights: the same text and usage, whichever door it came in by.
    body = cmpl["response"]["body"]
    assert body["choices"] == http.json()["choices"] and body["usage"] == http.json()["usage"]
    too_long = httpx.post(server.url + "/v1/completions", json={**COMPLETION, "max_tokens": 1000})
    assert long["error"] == too_long.json()


@pytest.mark.slow
def test_files_in_and_out_on_the_demo_model(real: ServerThread, tmp_path: Path) -> None:
    source, target = tmp_path / "batch.jsonl", tmp_path / "results.jsonl"
    source.write_text(BATCH + "\n\n")
    assert cli.main(["run-batch", "-i", str(source), "-o", f"file://{target}", *DEMO]) == 0
    check([json.loads(x) for x in target.read_text().splitlines()], real)
    # The temporary file was moved into place, not left beside it.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["batch.jsonl", "results.jsonl"]


@pytest.mark.slow
def test_stdin_to_stdout(real: ServerThread, monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.BytesIO()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(BATCH.encode())))
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(out))
    assert cli.main(["run-batch", "-i", "-", "-o", "-", *DEMO]) == 0
    check([json.loads(x) for x in out.getvalue().decode().splitlines()], real)


def test_a_file_output_appears_only_when_the_batch_is_done(tmp_path: Path) -> None:
    scratch, target = tmp_path / "scratch", tmp_path / "out" / "results.jsonl"
    scratch.mkdir()
    target.parent.mkdir()
    with output_writer(str(target), str(scratch)) as write:
        write(b"{}\n")
        assert not target.exists() and len(list(scratch.iterdir())) == 1
    assert target.read_bytes() == b"{}\n" and not list(scratch.iterdir())
    assert target.stat().st_mode & 0o044  # readable as any file made under the umask
    with pytest.raises(RuntimeError), output_writer(str(tmp_path / "failed.jsonl"), None) as write:
        write(b"half")
        raise RuntimeError("the engine died")
    assert not (tmp_path / "failed.jsonl").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "scratch"]
