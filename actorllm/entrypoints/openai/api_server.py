"""``python -m actorllm.entrypoints.openai.api_server [flags]``: vLLM's older way of starting
its server (``python -m vllm.entrypoints.openai.api_server --model ...``, still in many
Dockerfiles), so such a launch line works after renaming ``vllm`` to ``actorllm``. It is
``actorllm serve`` with the same flags."""

from __future__ import annotations

import sys

from actorllm.entrypoints.cli import main

if __name__ == "__main__":
    sys.exit(main(["serve", *sys.argv[1:]]))
