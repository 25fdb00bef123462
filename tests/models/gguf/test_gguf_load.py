"""GGUF files written with the ``gguf`` package from tiny random models load with their
linears quantized and give the tokens (and HF's logprobs) of the reference holding the
dequantized weights; what is not run is refused by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import pytest
from torch import nn

from actorllm.kernels.quant_gemm import gguf_a8_inputs
from actorllm.models.config import CheckpointConfig
from actorllm.models.gguf.blocks import GGUFTypeError
from actorllm.models.gguf.config import GGUFError
from actorllm.models.gguf.linear import GGUFLinear
from tests.helpers.gguf_checkpoints import rewrite_gguf as _rewrite
from tests.helpers.gguf_checkpoints import write_gguf
from tests.helpers.models import hf_logprobs, load_hf_model
from tests.models.test_family_parity import assert_hf_greedy, run_greedy

CASES: list[tuple[str, dict[str, Any]]] = [
    ("qwen3", dict(qtype="Q8_0")),
    # Q4_K_M's mix: Q4_K with Q6_K for attn_v / ffn_down (fused qkv of two layouts);
    # llama: the converter's q/k permutation undone.
    (
        "llama",
        dict(qtype="Q4_K", overrides={"v_proj": "Q6_K", "down_proj": "Q6_K"}, head_type="Q6_K"),
    ),
    # qwen2: q/k/v biases; a tied head read from a quantized token_embd.
    ("qwen2", dict(qtype="Q4_0", embed_type="Q8_0", tie_word_embeddings=True)),
    # Q5_K_M's mix (Q5_K, Q6_K for attn_v / ffn_down and the head).
    (
        "qwen3",
        dict(qtype="Q5_K", overrides={"v_proj": "Q6_K", "down_proj": "Q6_K"}, head_type="Q6_K"),
    ),
    # Q3_K_M's mix (Q3_K, Q5_K attn_v, Q4_K ffn_down); Q2_K's (Q2_K, Q3_K ffn_down, Q4_K
    # attn_v); llama's permutation on 4-bit groups of 16.
    (
        "llama",
        dict(qtype="Q3_K", overrides={"v_proj": "Q5_K", "down_proj": "Q4_K"}, head_type="Q6_K"),
    ),
    (
        "qwen3",
        dict(
            qtype="Q2_K",
            overrides={"v_proj": "Q4_K", "down_proj": "Q3_K"},
            head_type="Q6_K",
            embed_type="Q2_K",
        ),
    ),
    # The older types, quantized by gguf.quants (Q4_1 with a Q5_1 v, Q5_0 embedding).
    (
        "qwen2",
        dict(
            qtype="Q4_1",
            overrides={"v_proj": "Q5_1", "down_proj": "Q5_0"},
            embed_type="Q5_0",
            tie_word_embeddings=True,
        ),
    ),
]

# With int8 inputs (the default) logprobs stay this close to the reference's: measured
# 0.12 (Q8_0), 0.26 (Q4_K_M's mix), 0.27 (Q5_K_M's) here, 1e-5 with float inputs; one layer's scales
# 1.5x off move them by over 1.2.
A8_TOL = 0.6


def greedy_tokens(path: Path, num_blocks: int = 160) -> list[list[int]]:
    return [r.outputs for r in run_greedy(path, num_blocks).reqs.values()]


def assert_equals_dequantized_reference(
    tmp_path: Path, family: str, kw: dict[str, Any], num_blocks: int = 160
) -> None:
    """The GGUF file of ``family`` (``write_gguf``'s ``kw``) gives the greedy tokens of the
    checkpoint holding its dequantized weights, and transformers' on those weights."""
    ref, path = write_gguf(tmp_path, family, **kw)
    driver = run_greedy(path, num_blocks)
    assert [r.outputs for r in driver.reqs.values()] == greedy_tokens(ref, num_blocks)
    assert_hf_greedy(load_hf_model(ref), driver)  # transformers on the same weights


@pytest.mark.usefixtures("float_inputs")
@pytest.mark.parametrize(("family", "kw"), CASES, ids=[f"{f}-{k['qtype']}" for f, k in CASES])
def test_greedy_tokens_equal_the_dequantized_reference(
    tmp_path: Path, family: str, kw: dict[str, Any]
) -> None:
    assert_equals_dequantized_reference(tmp_path, family, kw)


def _logprob_error(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    family: str,
    kw: dict[str, Any],
    scale_error: float,
) -> float:
    """The largest distance between the GGUF model's greedy tokens' logprobs (default
    settings: int8 inputs) and transformers' over the dequantized weights, with layer 0's
    down projection scaled by ``scale_error`` after load."""
    ref, path = write_gguf(tmp_path, family, **kw)
    set_weights = GGUFLinear.set_weights

    def scaled(self: GGUFLinear, parts: list[Any], bias: Any) -> None:
        if self.name.endswith("layers.0.mlp.down_proj"):
            for p in parts:
                p.scales.mul_(scale_error)
                if p.offsets is not None:  # symmetric codes have none
                    p.offsets.mul_(scale_error)
        set_weights(self, parts, bias)

    monkeypatch.setattr(GGUFLinear, "set_weights", scaled)
    hf = load_hf_model(ref)
    worst = 0.0
    for r in run_greedy(path).reqs.values():
        lp = hf_logprobs(hf, r.prompt + r.outputs)  # [L, V] of the dequantized reference
        for i, tok in enumerate(r.outputs):
            worst = max(worst, abs(r.logprobs[i].logprobs[0] - lp[len(r.prompt) + i - 1, tok]))
    return float(worst)


@pytest.mark.parametrize(
    ("family", "kw"),
    [CASES[0], CASES[1], CASES[3]],
    ids=["qwen3-Q8_0", "llama-Q4_K_M", "qwen3-Q5_K_M"],
)
def test_int8_inputs_keep_logprobs_close_to_the_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, family: str, kw: dict[str, Any]
) -> None:
    """By default GGUF's blocks multiply inputs rounded to int8 (Q8_0 / Q6_K / Q5_K:
    q8a8_gemm.c; 4-bit: W4A8), as llama.cpp does."""
    right = _logprob_error(tmp_path / "right", monkeypatch, family, kw, 1.0)
    wrong = _logprob_error(tmp_path / "wrong", monkeypatch, family, kw, 1.5)
    assert right < A8_TOL < wrong
    if gguf_a8_inputs():  # the inputs really were rounded (float inputs: within 1e-4)
        assert right > 1e-3


def test_an_undone_permutation_would_show(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison can fail: llama's q/k rows left in llama.cpp's order change tokens."""
    ref, path = write_gguf(tmp_path, "llama", qtype="Q8_0")
    monkeypatch.setattr("actorllm.models.gguf.load.PERMUTED_QK", frozenset())
    assert greedy_tokens(path) != greedy_tokens(ref)


def test_linears_stay_quantized(tmp_path: Path) -> None:
    from actorllm.worker.model_runner import ModelRunner

    _ref, path = write_gguf(tmp_path, "qwen3", qtype="Q4_0")
    runner = ModelRunner(path, dtype="float32", max_model_len=64)
    runner.load_model()
    assert runner.model is not None
    modules = list(runner.model.modules())
    assert not any(type(m) is nn.Linear for m in modules)
    linears = [m for m in modules if isinstance(m, GGUFLinear)]
    assert len(linears) == 2 * 4 + 1  # qkv, o, gate_up, down per layer; the head
    weights = sum(m.in_features * m.out_features for m in linears)
    held = sum(b.numel() * b.element_size() for m in linears for b in m.buffers())
    # Q4_0: half a byte per weight plus a float32 scale and offset per 32 (0.75 B/weight)
    # against float32's 4.
    assert held <= 0.76 * weights
    assert runner.weight_bytes < 0.5 * 4 * sum(p.numel() for p in load_hf_model(_ref).parameters())


def test_a_quantized_token_embedding_stays_in_its_blocks(tmp_path: Path) -> None:
    """The embedding reads its rows out of the blocks (no float copy of [V, H]); a tied
    head and the embedding hold one copy; the rows are the float embedding's."""
    import torch

    from actorllm.models.gguf.embedding import GGUFEmbedding
    from actorllm.worker.model_runner import ModelRunner

    ref, path = write_gguf(tmp_path, "qwen2", qtype="Q4_0", embed_type="Q8_0",
                           tie_word_embeddings=True)  # fmt: skip
    runner = ModelRunner(path, dtype="float32", max_model_len=64)
    runner.load_model()
    assert runner.model is not None
    emb, head = runner.model.model.embed_tokens, runner.model.lm_head
    assert isinstance(emb, GGUFEmbedding) and emb.qtype == "Q8_0"
    assert isinstance(head, GGUFLinear) and emb.packed.data_ptr() == head.p0_packed.data_ptr()
    ids = torch.tensor([0, 5, 17, 5])
    expect = load_hf_model(ref).get_input_embeddings().weight[ids]
    assert torch.equal(emb(ids), expect)


@pytest.fixture(scope="module")
def q8_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_gguf(tmp_path_factory.mktemp("gguf"), "qwen3", qtype="Q8_0")


@pytest.fixture
def q8_file(q8_pair: tuple[Path, Path]) -> Path:
    return q8_pair[1]


def test_a_type_without_a_kernel_is_refused_naming_tensor_and_type(
    q8_file: Path, tmp_path: Path
) -> None:
    path = _rewrite(q8_file, tmp_path / "tq2.gguf", qtype=gguf.GGMLQuantizationType.TQ2_0)
    with pytest.raises(GGUFTypeError, match=r"'blk.0.ffn_down.weight' has type TQ2_0"):
        run_greedy(path)


# llama.cpp's names of families served from safetensors only (OLMo 3 converts as olmo2).
# (transformers' GGUF reader reads none of these; gemma 1 neither.)
NOT_RUN = ("gemma", "smollm3", "ernie4_5", "arcee", "olmo2", "exaone4", "glm4", "chatglm",
           "seed_oss", "granitemoe", "granite", "apertus", "command-r", "cohere2", "phi2",
           "gptneox")  # fmt: skip


@pytest.mark.parametrize("arch", NOT_RUN)
def test_an_architecture_not_run_is_refused_by_name(
    q8_file: Path, tmp_path: Path, arch: str
) -> None:
    path = _rewrite(q8_file, tmp_path / f"{arch}.gguf", arch=arch)
    with pytest.raises(GGUFError, match=f"GGUF architecture '{arch}' is not supported"):
        CheckpointConfig.from_pretrained(path)


def test_rope_factors_are_refused_by_name(q8_file: Path, tmp_path: Path) -> None:
    path = _rewrite(q8_file, tmp_path / "rope.gguf", extra="rope_freqs.weight")
    with pytest.raises(GGUFError, match=r"rope_freqs\.weight"):
        CheckpointConfig.from_pretrained(path)


def test_expert_tensors_without_expert_count_are_refused_by_name(
    q8_file: Path, tmp_path: Path
) -> None:
    """Mixtral's GGUF files say architecture llama: expert tensors need llama.expert_count."""
    path = _rewrite(q8_file, tmp_path / "moe.gguf", extra="blk.0.ffn_gate_exps.weight")
    with pytest.raises(GGUFError, match=r"GGUF MoE experts .*blk\.0\.ffn_gate_exps\.weight"):
        CheckpointConfig.from_pretrained(path)


def test_expert_count_without_expert_tensors_is_refused_by_name(
    q8_file: Path, tmp_path: Path
) -> None:
    path = _rewrite(q8_file, tmp_path / "moe.gguf", keys={"qwen3.expert_count": 4})
    with pytest.raises(GGUFError, match=r"qwen3\.expert_count=4, tensors \[\]"):
        CheckpointConfig.from_pretrained(path)


def test_a_corrupt_file_is_refused(q8_file: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(q8_file.read_bytes()[:4096])
    with pytest.raises(GGUFError, match="not a readable GGUF file"):
        CheckpointConfig.from_pretrained(bad)


@pytest.mark.usefixtures("float_inputs")
def test_llm_runs_a_gguf_file_with_a_tokenizer(q8_pair: tuple[Path, Path]) -> None:
    from actorllm import LLM, SamplingParams
    from actorllm.demo import demo_tokenizer_path
    from actorllm.engine.config.engine_config import EngineConfig, EngineConfigError

    ref, path = q8_pair
    with pytest.raises(EngineConfigError, match="tokenizer"):
        EngineConfig(model=str(path)).resolved_tokenizer()
    greedy = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    tokens = []
    for model in (path, ref):
        with LLM(str(model), tokenizer=str(demo_tokenizer_path()), dtype="float32",
                 max_model_len=64, kv_cache_memory_bytes=4 * 2**20) as llm:  # fmt: skip
            (out,) = llm.generate({"prompt_token_ids": [5, 17, 42]}, greedy, use_tqdm=False)
            tokens.append(list(out.outputs[0].token_ids))
    assert len(tokens[0]) == 6
    assert tokens[0] == tokens[1]
