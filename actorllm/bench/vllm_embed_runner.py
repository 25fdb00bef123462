"""Embedding throughput on vLLM's CPU build; executed by the vLLM venv's Python.

Imports nothing from actorllm (the vLLM venv does not have it). Reads a job (JSON) from
the path in argv[1]: ``model``, ``dtype``, ``texts``, ``max_num_seqs``,
``max_num_batched_tokens``, ``vectors`` (where to save the embeddings, ``.npy``). Starts
``vllm.LLM(runner="pooling")``, embeds a warm-up batch, then times ``LLM.embed`` over all
the texts, and prints one JSON line of figures on its real stdout (vLLM's own logs go to
stderr).

The engine start sits under ``if __name__ == "__main__"``: vLLM's CPU engine core runs in a
spawned process that re-imports this module.
"""

from __future__ import annotations

import json
import time
from typing import Any, TextIO


def run(job: dict[str, Any], results: TextIO) -> None:
    import numpy as np
    import torch
    import vllm
    from vllm import LLM

    llm = LLM(
        model=job["model"],
        runner="pooling",
        dtype=job["dtype"],
        max_num_seqs=job["max_num_seqs"],
        max_num_batched_tokens=job["max_num_batched_tokens"],
    )
    texts = job["texts"]
    llm.embed(texts[: min(32, len(texts))], use_tqdm=False)  # warm-up
    start = time.perf_counter()
    outs = llm.embed(texts, use_tqdm=False)
    elapsed = time.perf_counter() - start
    np.save(job["vectors"], np.array([o.outputs.embedding for o in outs], dtype=np.float32))
    doc = {
        "elapsed_s": elapsed,
        "texts_per_s": len(texts) / elapsed,
        "dtype": str(llm.llm_engine.model_config.dtype).removeprefix("torch."),
        "vllm": vllm.__version__,
        "torch": torch.__version__,
    }
    results.write(json.dumps(doc) + "\n")
    results.flush()


if __name__ == "__main__":
    # A script in the vLLM venv: its sibling vllm_runner.py is on sys.path[0]
    from vllm_runner import run_script

    run_script(run)
