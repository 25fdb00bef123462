"""Stands in for vLLM's ``python -m vllm.entrypoints.openai.api_server`` in tests.

``bench serve --backend vllm`` runs ``<vllm python> -m vllm.entrypoints.openai.api_server
... --port P``; a test's fake "vllm python" runs this script with those arguments instead.
It writes its arguments and the vLLM variables of its environment to ``$FAKE_VLLM_RECORD``
and serves the scripted test engine (dev mode: ``/reset_prefix_cache``) on 127.0.0.1:P
until SIGTERM. Given ``-c`` with the driver of vLLM's serving client, it stands in for
that client instead (:func:`client`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio

# The peer's environment has no PYTHONPATH (bench drops ours): import the tree under test,
# not whichever actorllm the interpreter has installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def client(argv: list[str]) -> None:
    """vLLM's serving client as ``bench serve --peer`` runs it (``-c DRIVER ARGS``): the
    same workload through actorllm's own client, the result written under vLLM's keys;
    each call's arguments appended (a JSON line) to ``$FAKE_VLLM_CLIENT_RECORD``."""
    from actorllm.bench.datasets import random_requests
    from actorllm.bench.serve import run_serve

    with open(os.environ["FAKE_VLLM_CLIENT_RECORD"], "a") as f:
        f.write(json.dumps(argv) + "\n")

    def arg(name: str) -> str:
        return argv[argv.index(name) + 1]

    reqs = random_requests(
        int(arg("--num-prompts")),
        int(arg("--random-input-len")),
        int(arg("--random-output-len")),
        0.0,
        int(arg("--seed")),
        256,
    )
    fig = anyio.run(
        lambda: run_serve(
            arg("--base-url"),
            reqs,
            max_concurrency=int(arg("--max-concurrency")),
            temperature=float(arg("--temperature")),
        ),
        backend="trio",
    )
    result = {
        "completed": fig["completed"],
        "failed": fig["failed"],
        "duration": fig["duration_s"],
        "output_throughput": fig["output_tokens_per_s"],
        "total_token_throughput": fig["total_tokens_per_s"],
        "request_throughput": fig["requests_per_s"],
    }
    for ours, theirs in (("ttft_ms", "ttft"), ("tpot_ms", "tpot"), ("itl_ms", "itl"),
                         ("e2el_ms", "e2el")):  # fmt: skip
        result[f"median_{theirs}_ms"] = fig[ours]["median"]
        result[f"p99_{theirs}_ms"] = fig[ours]["p99"]
    Path(arg("--result-dir"), arg("--result-filename")).write_text(json.dumps(result))


def main(argv: list[str]) -> None:
    if argv[:1] == ["-c"] and "vllm.benchmarks.serve" in argv[1]:
        client(argv[2:])
        return
    if argv[:2] != ["-m", "vllm.entrypoints.openai.api_server"]:
        raise SystemExit(f"not vLLM's server module: {argv[:2]}")
    env = {k: v for k, v in os.environ.items() if k.startswith("VLLM_") or k == "PYTHONPATH"}
    Path(os.environ["FAKE_VLLM_RECORD"]).write_text(json.dumps({"argv": argv, "env": env}))
    # The server's imports here: the client stand-in (above) starts without them.
    from actorllm.entrypoints.openai.app import AppSettings, build_app
    from actorllm.entrypoints.server import ServerSettings, serve
    from actorllm.testing.engine_harness import open_test_engine

    port = int(argv[argv.index("--port") + 1])
    app = build_app(lambda: open_test_engine(), AppSettings(log_interval_s=0, dev_mode=True))
    anyio.run(serve, app, ServerSettings(port=port), backend="trio")


if __name__ == "__main__":
    main(sys.argv[1:])
