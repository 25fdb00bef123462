"""PyTorch ``.bin`` checkpoints (``save_pretrained(safe_serialization=False)``), one file
and sharded, load the weights their safetensors twin does: the same parameters (on every
tensor-parallel rank too) and HF's logits; ``--load-format`` picks the kind as vLLM does."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from actorllm.models.config import CheckpointConfig
from actorllm.models.loader import MissingCheckpointError, UnsafePickleError, load_model
from actorllm.models.parallel import shard_config
from tests.helpers.models import load_hf_model, make_tiny_checkpoint
from tests.models.test_family_parity import assert_hf_greedy, run_greedy


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(safetensors, pytorch_model.bin) saves of one random model."""
    root = tmp_path_factory.mktemp("twins")
    st = make_tiny_checkpoint(root / "st", "qwen2")
    pt = make_tiny_checkpoint(root / "pt", "qwen2", safe_serialization=False)
    return st, pt


def _load(path: Path, rank: int = 0, size: int = 1, **kw: object) -> torch.nn.Module:
    cfg = shard_config(CheckpointConfig.from_pretrained(path), rank, size)
    return load_model(path, cfg, dtype=torch.float32, progress=False, **kw)  # type: ignore[arg-type]


def _params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach() for k, v in model.state_dict().items()}


def _assert_same(a: torch.nn.Module, b: torch.nn.Module) -> None:
    pa, pb = _params(a), _params(b)
    assert pa.keys() == pb.keys()
    for k in pa:
        torch.testing.assert_close(pa[k], pb[k], rtol=0, atol=0, msg=k)


def test_bin_checkpoint_loads_the_safetensors_weights(twins: tuple[Path, Path]) -> None:
    st, pt = twins
    assert (pt / "pytorch_model.bin").is_file() and not list(pt.glob("*.safetensors"))
    _assert_same(_load(pt), _load(st))
    _assert_same(_load(pt, load_format="pt"), _load(st))


def test_bin_checkpoint_gives_hf_greedy_tokens_and_logprobs(twins: tuple[Path, Path]) -> None:
    _, pt = twins  # transformers reads the same pytorch_model.bin
    assert_hf_greedy(load_hf_model(pt), run_greedy(pt))


def test_sharded_bin_checkpoint_reads_the_index_shards(
    twins: tuple[Path, Path], tmp_path: Path
) -> None:
    st, _ = twins
    sharded = make_tiny_checkpoint(
        tmp_path, "qwen2", max_shard_size="40KB", safe_serialization=False
    )
    assert (sharded / "pytorch_model.bin.index.json").is_file()
    # A trainer's states and a stray consolidated file beside the indexed shards: never read.
    torch.save({"lr": torch.tensor(1.0)}, sharded / "training_args.bin")
    torch.save({"junk.weight": torch.zeros(3)}, sharded / "pytorch_model.bin")
    _assert_same(_load(sharded), _load(st))


def test_tensor_parallel_ranks_take_their_slices_of_a_bin(twins: tuple[Path, Path]) -> None:
    st, pt = twins
    for rank in (0, 1):
        _assert_same(_load(pt, rank, 2), _load(st, rank, 2))


def test_pt_format_on_a_safetensors_dir_is_refused_by_name(twins: tuple[Path, Path]) -> None:
    st, pt = twins
    with pytest.raises(MissingCheckpointError, match=r"\*\.bin or \*\.pt.*load-format pt"):
        _load(st, load_format="pt")
    with pytest.raises(MissingCheckpointError, match=r"\*\.safetensors.*load-format safetensors"):
        _load(pt, load_format="safetensors")


class _Payload:
    """Not a tensor, container or plain value: the restricted unpickler refuses it."""


def test_a_pickle_needing_code_is_refused_naming_the_file(
    twins: tuple[Path, Path], tmp_path: Path
) -> None:
    _, pt = twins
    for f in pt.iterdir():
        if f.name != "pytorch_model.bin":
            (tmp_path / f.name).write_bytes(f.read_bytes())
    state = torch.load(pt / "pytorch_model.bin", weights_only=True)
    torch.save({**state, "extra": _Payload()}, tmp_path / "pytorch_model.bin")
    with pytest.raises(UnsafePickleError, match=r"pytorch_model\.bin.*weights_only=True"):
        _load(tmp_path)
