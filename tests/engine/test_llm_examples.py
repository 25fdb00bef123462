"""The offline examples run as written (on a tiny model) and their processes end."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_example(name: str, model: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), model],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,  # a hang at exit fails here
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.timeout(240)
def test_offline_batch(tiny_model):
    lines = run_example("offline_batch.py", tiny_model).splitlines()
    assert [line.split(",")[0] for line in lines[:3]] == [
        "Prompt: 'The capital of France is'",
        "Prompt: 'def fibonacci(n):'",
        "Prompt: 'Once upon a time",
    ]
    assert sum(line.startswith("Chat reply: ") for line in lines) == 2


@pytest.mark.timeout(240)
def test_engine_loop(tiny_model):
    lines = run_example("engine_loop.py", tiny_model).splitlines()
    names = [line.split(" ")[0].rstrip(":") for line in lines]
    # The engine runs ahead of step() on its own thread: on a busy machine a short request
    # may finish before the third step aborts "endless".
    assert sorted(names[:3]) == ["code", "endless", "story"]
    assert lines[-1].endswith("unfinished: 0")


@pytest.mark.timeout(240)
def test_async_llm_engine(tiny_model):
    lines = run_example("async_llm_engine.py", tiny_model).splitlines()
    assert sorted(line.split(":")[0] for line in lines) == ["r1", "r2"]


@pytest.mark.timeout(240)
def test_generate_cli(tiny_model, tmp_path):
    """vLLM's generate.py form: engine flags parsed by FlexibleArgumentParser, then
    ``LLM(**vars(args))``; flags from the command line and from ``--config``."""
    cfg = tmp_path / "launch.yaml"
    cfg.write_text(f"model: {tiny_model}\nmax_model_len: 256\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "generate_cli.py"), "--config", str(cfg),
         "--max_tokens", "4", "--temperature", "0", "--kv-cache-memory-bytes", str(8 << 20)],
        capture_output=True, text=True, env=env, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert [line.split(", Generated")[0] for line in lines] == [
        "Prompt: 'Hello, my name is'",
        "Prompt: 'The capital of France is'",
        "Prompt: 'The future of AI is'",
    ]
