"""``actorllm serve`` as a user runs it: a launch line from vLLM's docs, in a child process,
on a hub id resolved offline from a hub-layout cache built here (a tiny random model)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from actorllm.bench.launch import _wait_healthy as wait_healthy
from actorllm.bench.launch import free_port
from actorllm.demo import demo_tokenizer_path
from tests.helpers.models import make_tiny_checkpoint

REPO_ID = "Qwen/Qwen2.5-1.5B-Instruct"  # the id in vLLM's quickstart
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def hub_home(tmp_path: Path) -> Path:
    """An HF_HOME whose hub cache holds a tiny model under REPO_ID (vocab of the demo
    tokenizer, whose files sit beside it)."""
    home = tmp_path / "hf"
    repo = home / "hub" / ("models--" + REPO_ID.replace("/", "--"))
    snapshot = make_tiny_checkpoint(
        repo / "snapshots" / COMMIT, "qwen2", vocab_size=4096, eos_token_id=0
    )
    for f in demo_tokenizer_path().iterdir():
        shutil.copy(f, snapshot / f.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return home


def test_vllm_quickstart_launch_line_serves_a_hub_id_offline(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "HF_HOME": str(hub_home(tmp_path)),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    env.pop("HF_HUB_CACHE", None)
    # vLLM's quickstart line, plus flags its launch scripts commonly carry.
    argv = f"serve {REPO_ID} --dtype auto --api-key token-abc123".split()
    argv += ["--max-model-len", "256", "--gpu-memory-utilization", "0.9", "--enforce-eager"]
    argv += ["--trust-remote-code", "--disable-log-requests", "--tensor-parallel-size", "1"]
    argv += ["--uvicorn-log-level", "warning", "--port", str(port)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "actorllm.entrypoints.cli", *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, url, timeout_s=120.0)
        client = openai.OpenAI(base_url=url + "/v1", api_key="token-abc123")
        assert [m.id for m in client.models.list().data] == [REPO_ID]
        out = client.completions.create(model=REPO_ID, prompt="Hello", max_tokens=4)
        assert out.usage is not None and out.usage.completion_tokens == 4
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url + "/v1", api_key="wrong").models.list()
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output
    # One warning for the flag with no meaning here, none for the ones we honour.
    assert output.count("--trust-remote-code has no effect") == 1
    assert "--gpu-memory-utilization has no effect on CPU" in output
    assert "--tensor-parallel-size" not in output


def test_a_missing_hub_model_exits_1_naming_it_and_the_cache(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    env.pop("HF_HUB_CACHE", None)
    done = subprocess.run(
        [sys.executable, "-m", "actorllm.entrypoints.cli", "serve", "org/absent", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "'org/absent'" in done.stderr and str(tmp_path / "hf" / "hub") in done.stderr


def test_serve_with_two_data_parallel_replicas(tmp_path: Path) -> None:
    """``--data-parallel-size 2`` on CPU: both replicas serve, /metrics shows each engine."""
    from tests.entrypoints.test_server_metrics import sample

    port = free_port()
    env = {**os.environ, "HF_HOME": str(hub_home(tmp_path)), "HF_HUB_OFFLINE": "1"}
    env.pop("HF_HUB_CACHE", None)
    argv = ["serve", REPO_ID, "--data-parallel-size", "2", "--max-model-len", "256"]
    argv += ["--uvicorn-log-level", "warning", "--port", str(port)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "actorllm.entrypoints.cli", *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, url, timeout_s=120.0)
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        for i in range(4):  # unrelated prompts: the idle replicas take turns
            out = client.completions.create(
                model=REPO_ID, prompt=f"prompt {i} " * (i + 1), max_tokens=3, temperature=0
            )
            assert out.usage is not None and out.usage.completion_tokens == 3
        text = httpx.get(url + "/metrics").text
        for engine in ("0", "1"):
            one = {"model_name": REPO_ID, "engine": engine}
            assert sample(text, "actorllm:prefix_cache_queries_total", **one) > 0
            assert sample(text, "actorllm:num_requests_running", **one) == 0
            assert sample(text, "actorllm:iteration_tokens_total_count", **one) > 0
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output


def test_a_yaml_launch_on_a_unix_socket_with_aliases_keys_and_middleware(tmp_path: Path) -> None:
    """vLLM's other launch forms, end to end: --config YAML, --uds, several --api-key and
    --served-model-name values, --middleware, --kv-transfer-config; the openai client over
    the Unix socket."""
    sock = tmp_path / "api.sock"
    config = tmp_path / "serve.yaml"
    config.write_text(
        "served-model-name: [demo, demo-alias]\n"
        "api-key: [key-a, key-b]\n"
        "max-model-len: 256\n"
        "middleware: [tests.entrypoints.test_server_ops.TagMiddleware]\n"
        "trust-remote-code: true\n"
        "dev-mode: true\n"
        "kv-transfer-config: {kv_connector: OffloadingConnector, kv_role: kv_both,\n"
        "                     kv_connector_extra_config: {host_bytes: 64MiB}}\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    argv = ["serve", "--config", str(config), "--uds", str(sock), "--log-interval", "0"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "actorllm.entrypoints.cli", *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    transport = httpx.HTTPTransport(uds=str(sock))
    try:
        with httpx.Client(base_url="http://localhost", transport=transport, timeout=5) as http:
            deadline = time.monotonic() + 120
            while True:
                assert proc.poll() is None, "actorllm serve exited during startup"
                try:
                    if http.get("/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "actorllm serve did not become healthy"
                time.sleep(0.2)
            assert http.get("/health").headers["x-tag"] == "class"  # the user's middleware
            # The KV connector from --kv-transfer-config is there to switch (dev mode).
            toggled = http.post("/kv_connector/toggle", params={"enabled": "false"})
            assert toggled.status_code == 200, toggled.text
            assert http.get("/kv_connector/enabled").json() == {"enabled": False}
        for key in ("key-a", "key-b"):
            uds_client = httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)))
            client = openai.OpenAI(
                base_url="http://localhost/v1", api_key=key, http_client=uds_client
            )
            assert [m.id for m in client.models.list().data] == ["demo", "demo-alias"]
            out = client.completions.create(model="demo-alias", prompt="Hello", max_tokens=2)
            assert out.model == "demo" and out.usage is not None
        with pytest.raises(openai.AuthenticationError):
            uds_client = httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)))
            openai.OpenAI(
                base_url="http://localhost/v1", api_key="key-c", http_client=uds_client
            ).models.list()
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output
    assert output.count("--trust-remote-code has no effect") == 1
