"""LoRA on the families served since SmolLM3, through ``LLM``: with an adapter of every
projection (Arcee's un-gated ``up_proj``, StarCoder 2's ``c_fc`` / ``c_proj``, GLM-4's
checkpoint-fused ``gate_up_proj``, SmolLM3's NoPE layers, OPT's ``model.decoder.*``
``out_proj`` and ``fc1`` / ``fc2``) each greedy token's logprob is
peft's own within 1e-4, and the base row beside it is the base model's."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from actorllm import LLM, SamplingParams
from actorllm.lora.request import LoRARequest
from tests.helpers.lora import ALL_PROJ, make_adapter
from tests.helpers.models import Family
from tests.models.test_family_engine_parity import _checkpoint

PROMPT = [11, 42, 97, 300, 5, 77, 1000, 2000, 3000, 17, 19]
GREEDY = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True, logprobs=1)
# Each family has some of them (OPT: out_proj, fc1 / fc2; Phi: dense, fc1 / fc2; GPT-NeoX:
# its fused query_key_value, dense, dense_h_to_4h / dense_4h_to_h; GPT-J: fc_in / fc_out;
# GPTBigCode: its fused c_attn, c_proj, c_fc).
TARGETS = (*ALL_PROJ, "gate_up_proj", "c_fc", "c_proj", "out_proj", "fc1", "fc2", "dense",
           "query_key_value", "dense_h_to_4h", "dense_4h_to_h", "fc_in", "fc_out",
           "c_attn")  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    "family",
    [
        "arcee",
        "starcoder2",
        "glm4",
        "smollm3",
        "opt",
        "phi",
        "gpt_neox",
        "gptj",
        "gpt_bigcode",
        "gpt2",
        "falcon_new",
    ],
)
def test_adapter_logprobs_equal_peft(tmp_path: Path, family: Family) -> None:
    _adapter_logprobs_equal_peft(tmp_path, family, tp=1)


@pytest.mark.slow
def test_gpt_neox_query_key_value_adapter_under_tensor_parallel(tmp_path: Path) -> None:
    """GPT-NeoX's B rows of query_key_value are head by head, as its weight's: each rank
    keeps its heads' block of rows."""
    _adapter_logprobs_equal_peft(tmp_path, "gpt_neox", tp=2)


def _adapter_logprobs_equal_peft(tmp_path: Path, family: Family, tp: int) -> None:
    import peft
    import transformers

    base = _checkpoint(tmp_path / family, family, {})
    adapter = make_adapter(base, tmp_path / "adapter", targets=TARGETS, r=8, seed=5)
    rows = [LoRARequest("a", 1, str(adapter)), None]
    engine = dict(enable_lora=True, max_loras=2, dtype="float32", max_model_len=64)
    with LLM(str(base), tensor_parallel_size=tp, **engine) as llm:
        outs = llm.generate([{"prompt_token_ids": PROMPT}] * 2, GREEDY, use_tqdm=False,
                            lora_request=rows)  # fmt: skip
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        base, dtype=torch.float32, attn_implementation="eager"
    )
    model = peft.PeftModel.from_pretrained(hf, str(adapter)).eval()
    for out, with_adapter in zip(outs, (True, False), strict=True):
        got = out.outputs[0]
        ids = torch.tensor([PROMPT + list(got.token_ids)])
        with torch.no_grad():
            if with_adapter:
                ref = model(ids).logits[0].log_softmax(-1)  # [L, V]
            else:
                with model.disable_adapter():
                    ref = model(ids).logits[0].log_softmax(-1)
        assert got.logprobs is not None
        for i, tok in enumerate(got.token_ids):
            row = ref[len(PROMPT) + i - 1]
            assert row[tok] >= row.max() - 1e-4, (with_adapter, i)
            assert abs(got.logprobs[i][tok].logprob - row[tok].item()) < 1e-4, (with_adapter, i)
