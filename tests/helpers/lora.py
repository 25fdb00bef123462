"""Random PEFT LoRA adapters of tiny checkpoints, and peft's own greedy reference.

base = make_tiny_checkpoint(tmp_path / "base", "llama")
sql = make_adapter(base, tmp_path / "sql", seed=1)            # q/k/v/o + gate/up/down
tokens = peft_greedy(base, sql, [1, 5, 9], max_tokens=6)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

ALL_PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ATTN_PROJ = ("q_proj", "k_proj", "v_proj", "o_proj")


def make_adapter(
    base: str | Path,
    directory: str | Path,
    *,
    targets: Sequence[str] = ALL_PROJ,
    r: int = 8,
    alpha: float = 16.0,
    use_rslora: bool = False,
    seed: int = 1,
    safe_serialization: bool = True,
    **lora_config: Any,
) -> Path:
    """A PEFT adapter of ``base`` with random A *and* B (PEFT starts B at zero, which would
    change nothing), saved in PEFT's format into ``directory`` (``safe_serialization=False``:
    ``adapter_model.bin``)."""
    import peft
    import transformers

    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    cfg = peft.LoraConfig(
        r=r, lora_alpha=alpha, target_modules=list(targets), use_rslora=use_rslora,
        lora_dropout=0.0, **lora_config,
    )  # fmt: skip
    pm = peft.get_peft_model(model, cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in pm.named_parameters():
            if "lora_B" in name or "lora_A" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * (0.3 / p.shape[-1] ** 0.5))
    path = Path(directory)
    pm.save_pretrained(path, safe_serialization=safe_serialization)
    return path


def peft_greedy(
    base: str | Path, rows: Mapping[str, tuple[str | Path | None, Sequence[int]]], max_tokens: int
) -> dict[str, list[int]]:
    """{row: greedy tokens} of ``base`` with each row's adapter (None: the base model), in
    peft's own implementation, float32; the base model is loaded once."""
    import peft
    import transformers

    model: Any = transformers.AutoModelForCausalLM.from_pretrained(
        base, dtype=torch.float32, attn_implementation="eager"
    )
    paths = sorted({str(a) for a, _ in rows.values() if a is not None})
    names = {p: f"adapter{i}" for i, p in enumerate(paths)}
    for p in paths:
        if not isinstance(model, peft.PeftModel):
            model = peft.PeftModel.from_pretrained(model, p, adapter_name=names[p])
        else:
            model.load_adapter(p, adapter_name=names[p])
    model.eval()
    out: dict[str, list[int]] = {}
    for row, (adapter, prompt) in rows.items():
        ids = torch.tensor([list(prompt)])
        kw = dict(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens,
                  do_sample=False, eos_token_id=None, pad_token_id=0)  # fmt: skip
        with torch.no_grad():
            if adapter is None and isinstance(model, peft.PeftModel):
                with model.disable_adapter():
                    gen = model.generate(**kw)
            else:
                if adapter is not None:
                    model.set_adapter(names[str(adapter)])
                gen = model.generate(**kw)
        out[row] = gen[0, len(prompt) :].tolist()
    return out
