"""``python -m actorllm.entrypoints.launchers.run_batch [flags]``: vLLM 0.32's module path of
its batch runner (``vllm.entrypoints.openai.run_batch`` is the older one); it is
``actorllm run-batch`` with the same flags."""

from __future__ import annotations

import sys

from actorllm.entrypoints.cli import main

if __name__ == "__main__":
    sys.exit(main(["run-batch", *sys.argv[1:]]))
