"""Tiny random EAGLE heads in SafeAILab's checkpoint layout, and transformers-built reference
drafts to check them against (dense causal recomputation, no KV cache, no paging)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file


def make_eagle_head(
    directory: Path, target: Path, *, seed: int = 0, bias: bool = True, hass: bool = False
) -> Path:
    """An EAGLE head for the Llama-shaped ``target``: one decoder layer without its input
    norm, ``fc`` [H, 2H] (+ bias), a junk ``embed_tokens`` that must be ignored."""
    import transformers
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    cfg = transformers.AutoConfig.from_pretrained(target)
    d = cfg.to_dict()
    head_cfg = transformers.LlamaConfig(
        **{k: d[k] for k in _SHAPE if k in d}, num_hidden_layers=1,
        architectures=["LlamaForCausalLM"], add_para_norm=hass,
    )  # fmt: skip
    torch.manual_seed(seed)
    layer = LlamaDecoderLayer(head_cfg, 0)
    gen = torch.Generator().manual_seed(seed)
    h = cfg.hidden_size
    tensors: dict[str, torch.Tensor] = {}
    for name, p in layer.state_dict().items():
        if name.startswith("input_layernorm"):
            continue  # EAGLE's first layer has none
        if name.endswith("layernorm.weight"):
            tensors[f"layers.0.{name}"] = 1.0 + 0.1 * torch.randn(p.shape, generator=gen)
        else:
            tensors[f"layers.0.{name}"] = torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5
    tensors["fc.weight"] = torch.randn(h, 2 * h, generator=gen) / (2 * h) ** 0.5
    if bias:
        tensors["fc.bias"] = 0.1 * torch.randn(h, generator=gen)
    if hass:
        tensors["embedding_layernorm.weight"] = 1.0 + 0.1 * torch.randn(h, generator=gen)
        tensors["pre_lm_head_layernorm.weight"] = 1.0 + 0.1 * torch.randn(h, generator=gen)
    tensors["embed_tokens.weight"] = torch.full((cfg.vocab_size, h), float("nan"))
    directory.mkdir(parents=True, exist_ok=True)
    head_cfg.save_pretrained(directory)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(directory / "model.safetensors"))
    return directory


_SHAPE = (
    "vocab_size", "hidden_size", "intermediate_size", "num_attention_heads",
    "num_key_value_heads", "rms_norm_eps", "max_position_embeddings", "rope_parameters",
)  # fmt: skip


class EagleReference:
    """transformers' Llama pieces computing what the head must draft."""

    def __init__(self, target: Path, head: Path) -> None:
        import transformers
        from safetensors.torch import load_file
        from transformers.models.llama.modeling_llama import (
            LlamaDecoderLayer,
            LlamaRMSNorm,
            LlamaRotaryEmbedding,
        )

        self.hf = transformers.AutoModelForCausalLM.from_pretrained(
            target, dtype=torch.float32, attn_implementation="eager"
        ).eval()
        cfg = transformers.AutoConfig.from_pretrained(head)
        cfg._attn_implementation = "eager"
        w = load_file(str(head / "model.safetensors"))
        self.layer = LlamaDecoderLayer(cfg, 0).eval()
        self.layer.input_layernorm = torch.nn.Identity()  # type: ignore[assignment]
        self.layer.load_state_dict(
            {k.removeprefix("layers.0."): v for k, v in w.items() if k.startswith("layers.0.")}
        )
        self.fc_w, self.fc_b = w["fc.weight"], w.get("fc.bias")
        self.norms: tuple[Any, Any] | None = None
        if "embedding_layernorm.weight" in w:
            e, hs = (
                LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps),
                LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps),
            )
            e.weight.data, hs.weight.data = (
                w["embedding_layernorm.weight"],
                w["pre_lm_head_layernorm.weight"],
            )
            self.norms = (e, hs)
        self.rotary = LlamaRotaryEmbedding(cfg)

    @torch.no_grad()
    def _head(self, ids: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """Rows p = 0..L-1: (token ids[p], hidden[p]) -> [L, H] (the head's x + residual)."""
        embed = self.hf.model.embed_tokens(ids)  # [L, H]
        if self.norms is not None:
            embed, hidden = self.norms[0](embed), self.norms[1](hidden)
        x = torch.nn.functional.linear(torch.cat([embed, hidden], -1), self.fc_w, self.fc_b)
        n = x.shape[0]
        pos = torch.arange(n)[None]
        mask = torch.full((n, n), float("-inf")).triu(1)[None, None]  # causal, additive
        out = self.layer(x[None], attention_mask=mask, position_ids=pos,
                         position_embeddings=self.rotary(x[None], pos))  # fmt: skip
        out = out[0] if isinstance(out, tuple) else out
        return out[0]

    @torch.no_grad()
    def drafts(self, tokens: list[int], k: int) -> list[int]:
        """The head's k greedy drafts after ``tokens`` (their target hidden states from HF)."""
        t = torch.tensor(tokens)
        hidden = self.hf.model(t[None]).last_hidden_state[0]  # [n, H], final norm applied
        ids, hs = t[1:], hidden[:-1]  # row p: token p + 1, hidden p
        out: list[int] = []
        for _ in range(k):
            h = self._head(ids, hs)
            nxt = int(self.hf.lm_head(h[-1]).argmax())
            out.append(nxt)
            ids = torch.cat([ids, torch.tensor([nxt])])
            hs = torch.cat([hs, h[-1:]])  # a further draft reads the head's own output
        return out
