"""Stands in for vLLM's ``python -m vllm.entrypoints.openai.api_server`` in tests.

``bench serve --backend vllm`` runs ``<vllm python> -m vllm.entrypoints.openai.api_server
... --port P``; a test's fake "vllm python" runs this script with those arguments instead.
It writes its arguments and the vLLM variables of its environment to ``$FAKE_VLLM_RECORD``
and serves the scripted test engine (dev mode: ``/reset_prefix_cache``) on 127.0.0.1:P
until SIGTERM.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio

from actorllm.entrypoints.openai.app import AppSettings, build_app
from actorllm.entrypoints.server import ServerSettings, serve
from actorllm.testing.engine_harness import open_test_engine


def main(argv: list[str]) -> None:
    if argv[:2] != ["-m", "vllm.entrypoints.openai.api_server"]:
        raise SystemExit(f"not vLLM's server module: {argv[:2]}")
    env = {k: v for k, v in os.environ.items() if k.startswith("VLLM_") or k == "PYTHONPATH"}
    Path(os.environ["FAKE_VLLM_RECORD"]).write_text(json.dumps({"argv": argv, "env": env}))
    port = int(argv[argv.index("--port") + 1])
    app = build_app(lambda: open_test_engine(), AppSettings(log_interval_s=0, dev_mode=True))
    anyio.run(serve, app, ServerSettings(port=port), backend="trio")


if __name__ == "__main__":
    main(sys.argv[1:])
