"""ColBERT (``HF_ColBERT``, answerai-colbert-small-v1's layout): a BERT saved as ``bert.*``
beside ``linear.weight``. Its token embeddings are transformers' hidden states through that
projection, its width read from the weight (or config.json), and it serves token_embed
only (late interaction), normalized."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from actorllm.engine.config.pooling_model import pooling_model, resolve_runner
from actorllm.models.bert import load_encoder
from actorllm.models.encoder_config import read_encoder_config

DIM = 12


def _colbert(path: Path, config_dim: int | None = None) -> Path:
    import safetensors.torch
    import transformers

    cfg = transformers.BertConfig(
        vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64,
    )  # fmt: skip
    cfg.architectures = ["HF_ColBERT"]
    torch.manual_seed(0)
    bert = transformers.BertModel(cfg, add_pooling_layer=False)
    weights = {f"bert.{k}": v.contiguous() for k, v in bert.state_dict().items()}
    weights["linear.weight"] = torch.randn(DIM, cfg.hidden_size)
    cfg.save_pretrained(path)
    if config_dim is not None:
        raw = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps({**raw, "colbert_dim": config_dim}))
    safetensors.torch.save_file(weights, path / "model.safetensors")
    return path


@pytest.fixture(scope="module")
def colbert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _colbert(tmp_path_factory.mktemp("colbert"))


def test_token_embeddings_are_transformers_hidden_states_projected(colbert: Path) -> None:
    import safetensors.torch
    import transformers

    cfg = read_encoder_config(colbert)
    assert (cfg.projection_dim, cfg.output_size) == (DIM, DIM)  # from the weight's rows
    ours = load_encoder(colbert, cfg, torch.float32, torch.device("cpu"))
    ref_bert = transformers.BertModel.from_pretrained(colbert, attn_implementation="eager")
    linear = safetensors.torch.load_file(colbert / "model.safetensors")["linear.weight"]
    seqs = [[2, 17, 40, 5, 3], [2, 9, 3]]
    ids = torch.tensor([t for s in seqs for t in s])  # [8], back to back
    with torch.inference_mode():
        got = ours(ids, torch.zeros_like(ids), [5, 3])
        want = [F.linear(ref_bert(torch.tensor([s])).last_hidden_state[0], linear) for s in seqs]
    assert got.shape == (8, DIM)
    torch.testing.assert_close(got, torch.cat(want), atol=1e-5, rtol=1e-5)


def test_it_serves_normalized_token_embeddings_only(colbert: Path) -> None:
    assert resolve_runner(colbert, "auto", "auto") == ("pooling", "none")
    pm = pooling_model(colbert, "none", None)
    assert pm.tasks == ("token_embed",) and pm.score_type == "late"
    assert pm.embedding_size == DIM and pm.spec.normalize


def test_config_json_gives_the_width_first(tmp_path: Path) -> None:
    """vLLM's order: colbert_dim (or dim, projection_dim) before the weight's shape."""
    assert read_encoder_config(_colbert(tmp_path, config_dim=DIM)).projection_dim == DIM
