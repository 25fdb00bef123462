"""The demo model: built once, atomically, loadable by transformers and by actorllm."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from actorllm.core.sampling_params import SamplingParams
from actorllm.demo.model import demo_model_path
from actorllm.models.config import CheckpointConfig
from actorllm.worker.model_runner import ModelRunner
from tests.helpers.sched_driver import SchedDriver


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("ACTORLLM_CACHE", str(cache))
    paths: list[Path] = []
    threads = [threading.Thread(target=lambda: paths.append(demo_model_path())) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    mp.undo()
    assert len(paths) == 3 and len(set(paths)) == 1  # concurrent first use: one model
    return paths[0]


def test_layout_and_idempotence(built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert built.name.startswith("demo-model-v")
    assert built.stat().st_mode & 0o755 == 0o755
    names = {p.name for p in built.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"} <= names
    assert [
        p.name for p in built.parent.iterdir() if p.name.startswith(".")
    ] == []  # no temp dirs left
    monkeypatch.setenv("ACTORLLM_CACHE", str(built.parent))
    mtime = (built / "model.safetensors").stat().st_mtime_ns
    assert demo_model_path() == built
    assert (built / "model.safetensors").stat().st_mtime_ns == mtime
    size = (built / "model.safetensors").stat().st_size
    assert 1_000_000 < size < 40_000_000


@pytest.mark.slow
def test_transformers_and_actorllm_agree(built: Path) -> None:
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(built)
    hf = transformers.AutoModelForCausalLM.from_pretrained(built, dtype=torch.float32).eval()
    cfg = CheckpointConfig.from_pretrained(built)
    assert cfg.vocab_size == len(tok) and cfg.eos_token_ids == [0, 2]
    ids = tok("Hello, demo world")["input_ids"]
    runner = ModelRunner(built, dtype="float32", max_model_len=256, block_size=16, max_num_seqs=2)
    runner.load_model()
    runner.initialize_kv_cache(32)
    d = SchedDriver(runner)
    d.add("x", ids, SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))
    d.run()
    with torch.no_grad():
        ref = hf.generate(torch.tensor([ids]), max_new_tokens=4, do_sample=False, eos_token_id=None)
    assert d.outputs["x"] == ref[0, len(ids) :].tolist()


def test_the_demo_model_speaks(built: Path) -> None:
    """The shipped weights are trained: greedy text from an English prompt is made of
    common English words (a random model gives a soup of byte pieces)."""
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(built)
    ids = tok("The value of")["input_ids"]
    runner = ModelRunner(built, max_model_len=256, block_size=16, max_num_seqs=2)
    runner.load_model()
    runner.initialize_kv_cache(32)
    d = SchedDriver(runner)
    d.add("x", ids, SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True))
    d.run()
    text = tok.decode(d.outputs["x"], skip_special_tokens=True)
    words = [w.strip(".,:;()'\"`").lower() for w in text.split()]
    common = {"the", "a", "of", "is", "to", "and", "in", "return", "if", "string", "value"}
    assert sum(w in common for w in words) >= 4, text
    assert sum(c.isascii() and (c.isprintable() or c.isspace()) for c in text) >= 0.95 * len(text)
