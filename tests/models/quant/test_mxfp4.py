"""gpt-oss's MXFP4 experts: dequantization against transformers' own, the experts kept
packed at load, and greedy parity with the float model built from the dequantized weights
(and with transformers on it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from actorllm.core.sampling_params import SamplingParams
from actorllm.models.config import CheckpointConfig
from actorllm.models.loader import QuantizationError, load_model
from actorllm.models.quant.mxfp4 import Mxfp4Experts, dequantize_mxfp4
from actorllm.worker.model_runner import ModelRunner
from tests.helpers.models import load_hf_model
from tests.helpers.mxfp4 import make_mxfp4_gpt_oss, quantize_mxfp4
from tests.helpers.sched_driver import SchedDriver
from tests.models.test_family_parity import assert_hf_greedy, run_greedy


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_mxfp4_gpt_oss(tmp_path_factory.mktemp("mxfp4"), num_kv_heads=2)


def test_dequantize_matches_transformers() -> None:
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    g = torch.Generator().manual_seed(0)
    blocks = torch.randint(0, 256, (3, 8, 4, 16), generator=g, dtype=torch.uint8)
    scales = torch.randint(110, 140, (3, 8, 4), generator=g, dtype=torch.uint8)
    for dtype in (torch.float32, torch.bfloat16):
        want = convert_moe_packed_tensors(blocks, scales, dtype=dtype)  # [E, cols, rows]
        got = dequantize_mxfp4(blocks, scales, dtype)  # [E, rows, cols]
        assert got.dtype == dtype
        torch.testing.assert_close(got, want.transpose(1, 2), atol=0, rtol=0)


def test_quantize_round_trips_representable_values() -> None:
    w = torch.tensor([[0.5, -1.5, 6.0, -0.0] * 8, [3.0, 2.0, -4.0, 1.0] * 8]) * 4
    blocks, scales = quantize_mxfp4(w)
    torch.testing.assert_close(dequantize_mxfp4(blocks, scales, torch.float32), w)


def test_experts_stay_packed(checkpoints: tuple[Path, Path]) -> None:
    quant, dense = checkpoints
    model = load_model(quant, CheckpointConfig.from_pretrained(quant), dtype="float32")
    experts = [m for m in model.modules() if isinstance(m, Mxfp4Experts)]
    assert len(experts) == 2
    packed = {n: p for n, p in experts[0].named_parameters() if p.dtype == torch.uint8}
    assert set(packed) == {"w13_blocks", "w13_scales", "w2_blocks", "w2_scales"}
    weights = experts[0].w13_blocks.numel() * 2 + experts[0].w2_blocks.numel() * 2
    bits = 8 * sum(p.numel() for p in packed.values()) / weights
    assert bits == 4.25  # 4 bits a code, 8 per 32 for the scale
    # The loader split gate and up (interleaved on disk) without unpacking them.
    ref = load_model(dense, CheckpointConfig.from_pretrained(dense), dtype="float32")
    w13 = dict(ref.named_parameters())["model.layers.1.mlp.experts.w13"]
    torch.testing.assert_close(experts[1].weights(3, torch.float32)[0], w13[3], atol=0, rtol=0)


def _greedy(path: Path, dtype: str) -> dict[str, list[int]]:
    runner = ModelRunner(path, dtype=dtype, block_size=4, max_num_seqs=4, max_model_len=64)
    runner.load_model()
    runner.initialize_kv_cache(num_blocks=64)
    driver = SchedDriver(runner, token_budget=32)
    greedy = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    g = torch.Generator().manual_seed(5)
    for i, n in enumerate((4, 11, 23)):
        driver.add(str(i), torch.randint(3, 128, (n,), generator=g).tolist(), greedy)
    driver.run()
    return driver.outputs


@pytest.mark.slow
def test_greedy_parity_with_the_dequantized_model(checkpoints: tuple[Path, Path]) -> None:
    """float32: the same tokens as the float model on the dequantized weights, and every
    token transformers' argmax there; bfloat16: the same tokens as that float model run in
    bfloat16 (both see the same bf16 weights: MXFP4 values are exact in bf16)."""
    quant, dense = checkpoints
    driver = run_greedy(quant)
    assert_hf_greedy(load_hf_model(dense), driver)
    assert driver.outputs == run_greedy(dense).outputs
    assert _greedy(quant, "bfloat16") == _greedy(dense, "bfloat16")


def test_mxfp4_is_refused_beyond_gpt_oss() -> None:
    raw: dict[str, Any] = {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": 32,
        "hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_local_experts": 2, "num_experts_per_tok": 1,
        "quantization_config": {"quant_method": "mxfp4"},
    }  # fmt: skip
    with pytest.raises(QuantizationError, match=r"mxfp4.*gpt-oss"):
        load_model("/nonexistent", CheckpointConfig.from_dict(raw), load_format="dummy")
