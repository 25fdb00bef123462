"""LoRA on the families served since SmolLM3, through ``LLM``: an adapter of every
projection gives peft's own greedy tokens (Arcee's un-gated ``up_proj``, GLM-4's
checkpoint-fused ``gate_up_proj``, SmolLM3's NoPE layers), the base row beside it too."""

from __future__ import annotations

from pathlib import Path

import pytest

from actorllm import LLM, SamplingParams
from actorllm.lora.request import LoRARequest
from tests.helpers.lora import ALL_PROJ, make_adapter, peft_greedy
from tests.helpers.models import Family
from tests.models.test_family_engine_parity import _checkpoint

PROMPT = [11, 42, 97, 300, 5, 77, 1000, 2000, 3000, 17, 19]
GREEDY = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["arcee", "glm4", "smollm3"])
def test_adapter_tokens_equal_peft(tmp_path: Path, family: Family) -> None:
    base = _checkpoint(tmp_path / family, family, {})
    targets = (*ALL_PROJ, "gate_up_proj")  # each family has those of them it has
    adapter = make_adapter(base, tmp_path / "adapter", targets=targets, r=8, seed=5)
    want = peft_greedy(base, {"lora": (adapter, PROMPT), "base": (None, PROMPT)}, 8)
    assert want["lora"] != want["base"]  # the adapter changes the tokens
    rows = [LoRARequest("a", 1, str(adapter)), None]
    with LLM(str(base), enable_lora=True, max_loras=2, dtype="float32", max_model_len=64) as llm:
        outs = llm.generate([{"prompt_token_ids": PROMPT}] * 2, GREEDY, use_tqdm=False,
                            lora_request=rows)  # fmt: skip
    assert [list(o.outputs[0].token_ids) for o in outs] == [want["lora"], want["base"]]
