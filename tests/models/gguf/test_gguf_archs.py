"""GGUF files of the architectures beyond the Llama shape (``models/gguf/archs.py``), written
from a tiny random HF model of each family as llama.cpp's converter writes them, give the
greedy tokens of the checkpoint holding their dequantized weights and of transformers on
it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from actorllm.kernels.ops import get_ops
from actorllm.models.config import CheckpointConfig
from actorllm.models.gguf.config import GGUFError
from tests.helpers.gguf_checkpoints import rewrite_gguf, write_gguf
from tests.models.gguf.test_gguf_load import assert_equals_dequantized_reference

CASES: list[tuple[str, dict[str, Any]]] = [
    # Fused attn_qkv and ffn_up (gate and up) read whole.
    ("phi3", dict(qtype="Q8_0")),
    # Gemma's norms stored as 1 + w; tied head; soft-capping; sliding layers. The file has
    # no query_pre_attn_scalar: llama.cpp's head_dim (64) is Gemma 2 2B / 9B's.
    (
        "gemma2",
        dict(
            qtype="Q4_K",
            overrides={"v_proj": "Q6_K"},
            tie_word_embeddings=True,
            query_pre_attn_scalar=64,
        ),
    ),
    # Per-head q/k norms (also 1 + w), a local RoPE base beside the full layers' scaled
    # one, llama.cpp's fixed pattern (a full layer in six).
    (
        "gemma3",
        dict(
            qtype="Q5_K",
            overrides={"down_proj": "Q6_K"},
            query_pre_attn_scalar=64,
            sliding_window_pattern=6,
            num_hidden_layers=6,
        ),
    ),
    # LayerNorms with biases, RoPE on a quarter of each head, q/k/v biases.
    ("stablelm", dict(qtype="Q4_0")),
    # Un-gated GELU MLP, biases everywhere, a sliding window.
    ("starcoder2", dict(qtype="Q8_0", tie_word_embeddings=True)),
    # Learned positions, fused attn_qkv transposed from Conv1D, the head a copy of
    # token_embd (as the converter writes it), in a K-quant.
    ("gpt2", dict(qtype="Q4_K", embed_type="Q6_K", tie_word_embeddings=True)),
]


@pytest.mark.usefixtures("float_inputs")
@pytest.mark.parametrize(("family", "kw"), CASES, ids=[f"{f}-{k['qtype']}" for f, k in CASES])
def test_greedy_tokens_equal_the_dequantized_reference(
    tmp_path: Path, family: str, kw: dict[str, Any]
) -> None:
    # Gemma 3's six layers (five sliding, one full) hold more blocks than two would.
    assert_equals_dequantized_reference(tmp_path, family, kw, num_blocks=640)


# transformers' GGUF config mapping leaves these out (its defaults do not fit a tiny model).
HF_READER_KW: dict[str, dict[str, int]] = {
    "phi3": {"pad_token_id": 0},
    "starcoder2": {"vocab_size": 256},
    "gpt2": {"vocab_size": 256, "n_inner": 512, "n_positions": 512},
}


@pytest.mark.parametrize(("family", "kw"), CASES, ids=[f"{f}-{k['qtype']}" for f, k in CASES])
def test_transformers_gguf_reader_reads_the_reference_weights(
    tmp_path: Path, family: str, kw: dict[str, Any]
) -> None:
    """The test files follow llama.cpp's conventions as transformers' GGUF reader reads
    them (names, Phi-3's fused tensors, Gemma's 1 + w norms): it takes the reference's
    tensors back from each file. (Its config mapping is its own: it reads no soft-capping
    or Gemma 3 pattern, so only the weights are compared.)"""
    import transformers

    from tests.helpers.models import load_hf_model

    ref, path = write_gguf(tmp_path, family, **kw)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32, **HF_READER_KW.get(family, {})
    ).state_dict()
    ours = load_hf_model(ref).state_dict()
    assert set(ours) <= set(theirs)
    assert [k for k, v in ours.items() if not torch.equal(v, theirs[k])] == []


@pytest.fixture(scope="module")
def phi3_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gguf(tmp_path_factory.mktemp("phi3"), "phi3", qtype="Q8_0")[1]


def test_phi3_longrope_factors_are_refused_by_name(phi3_file: Path, tmp_path: Path) -> None:
    path = rewrite_gguf(phi3_file, tmp_path / "long.gguf", extra="rope_factors_long.weight")
    with pytest.raises(GGUFError, match=r"'rope_factors_long\.weight' \(Phi-3's LongRoPE"):
        CheckpointConfig.from_pretrained(path)


def test_stablelm_per_head_qk_norms_are_refused_by_name(tmp_path: Path) -> None:
    _ref, src = write_gguf(tmp_path, "stablelm", qtype="Q8_0")
    path = rewrite_gguf(src, tmp_path / "qk.gguf", extra="blk.0.attn_q_norm.weight")
    with pytest.raises(GGUFError, match=r"stablelm per-head q/k LayerNorms \(attn_q_norm\)"):
        CheckpointConfig.from_pretrained(path)


def test_phi3_fused_tensors_are_not_split_over_ranks(phi3_file: Path) -> None:
    """Phi-3's attn_qkv holds q, k and v: a rank's rows of each are not one run of it."""
    import msgspec

    from actorllm.models.gguf.load import load_gguf
    from actorllm.models.parallel import TensorParallelError

    cfg = CheckpointConfig.from_pretrained(phi3_file)
    rank = msgspec.structs.replace(cfg, tp_size=2, tp_rank=0, full_num_heads=cfg.num_heads,
                                   full_num_kv_heads=cfg.num_kv_heads)  # fmt: skip
    with pytest.raises(TensorParallelError, match=r"'blk\.0\.attn_qkv\.weight' stores"):
        load_gguf(phi3_file, rank, dtype=torch.float32, device="cpu", ops=get_ops("auto", "cpu"),
                  max_positions=64)  # fmt: skip


def test_gemma_sliding_window_pattern_is_llama_cpps(tmp_path: Path) -> None:
    """Without ``attention.sliding_window_pattern`` Gemma 2 slides every other layer and
    Gemma 3 five in six (llama.cpp's defaults); with a period ``n`` one layer in ``n`` is
    full (0: none); other architectures refuse the key. Gemma 3's sliding layers take
    ``rope.freq_base_swa`` where the file has it."""
    _ref, src = write_gguf(tmp_path, "gemma3", qtype="Q8_0", query_pre_attn_scalar=64,
                           sliding_window_pattern=6, num_hidden_layers=6)  # fmt: skip
    assert CheckpointConfig.from_pretrained(src).sliding_windows == [8] * 5 + [None]
    for period, windows in ((2, [8, None] * 3), (0, [8] * 6), (1, [None] * 6)):
        key = "gemma3.attention.sliding_window_pattern"
        path = rewrite_gguf(src, tmp_path / f"p{period}.gguf", keys={key: period})
        assert CheckpointConfig.from_pretrained(path).sliding_windows == windows, period
    assert CheckpointConfig.from_pretrained(src).local_rope_theta == 10000.0
    path = rewrite_gguf(src, tmp_path / "swa.gguf", keys={"gemma3.rope.freq_base_swa": 20000})
    assert CheckpointConfig.from_pretrained(path).local_rope_theta == 20000.0
    _ref, qwen = write_gguf(tmp_path / "qwen3", "qwen3", qtype="Q8_0")
    path = rewrite_gguf(
        qwen, tmp_path / "q.gguf", keys={"qwen3.attention.sliding_window_pattern": 2}
    )
    with pytest.raises(GGUFError, match=r"qwen3\.attention\.sliding_window_pattern"):
        CheckpointConfig.from_pretrained(path)
