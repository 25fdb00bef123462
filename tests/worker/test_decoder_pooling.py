"""A decoder pooling model's classifier head is read from whichever weight files the
checkpoint has (safetensors or a PyTorch .bin), and refused by name where it is absent."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from actorllm.worker.decoder_pooling import score_head

SCORE = torch.arange(6.0).reshape(2, 3)  # [num_labels, H]


def test_the_score_head_comes_from_safetensors_or_a_bin(tmp_path: Path) -> None:
    (tmp_path / "st").mkdir()
    save_file({"score.weight": SCORE}, str(tmp_path / "st" / "model.safetensors"))
    (tmp_path / "pt").mkdir()
    torch.save({"score.weight": SCORE}, tmp_path / "pt" / "pytorch_model.bin")
    for d in ("st", "pt"):
        got = score_head(tmp_path / d, torch.float32, torch.device("cpu"))
        assert torch.equal(got, SCORE), d
    with pytest.raises(ValueError, match=r"score\.weight"):
        score_head(tmp_path, torch.float32, torch.device("cpu"))  # no weight files at all
