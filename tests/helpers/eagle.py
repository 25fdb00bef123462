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


def _reference_parts(target: Path, head: Path) -> tuple[Any, Any, dict[str, torch.Tensor]]:
    """transformers' float32 target, the head's config (eager attention), its tensors."""
    import transformers
    from safetensors.torch import load_file

    hf = transformers.AutoModelForCausalLM.from_pretrained(
        target, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    cfg = transformers.AutoConfig.from_pretrained(head)
    cfg._attn_implementation = "eager"
    return hf, cfg, load_file(str(head / "model.safetensors"))


class EagleReference:
    """transformers' Llama pieces computing what the head must draft."""

    def __init__(self, target: Path, head: Path) -> None:
        from transformers.models.llama.modeling_llama import (
            LlamaDecoderLayer,
            LlamaRMSNorm,
            LlamaRotaryEmbedding,
        )

        self.hf, cfg, w = _reference_parts(target, head)
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


def make_eagle3_head(
    directory: Path,
    target: Path,
    *,
    seed: int = 0,
    draft_vocab: int | None = None,
    aux_ids: list[int] | None = None,
) -> Path:
    """An EAGLE-3 head for the Llama-shaped ``target`` in SafeAILab's layout: ``midlayer``
    (q/k/v over [2H]), ``hidden_norm``, ``fc`` [H, 3H], a final ``norm``, its own
    ``lm_head`` over ``draft_vocab`` ids mapped by ``d2t`` to a random subset of the target's
    (None: the whole vocabulary, no map)."""
    import transformers

    cfg = transformers.AutoConfig.from_pretrained(target)
    d = cfg.to_dict()
    h, v = cfg.hidden_size, cfg.vocab_size
    hd = d.get("head_dim") or h // cfg.num_attention_heads
    extra: dict[str, Any] = {"draft_vocab_size": draft_vocab or v}
    if aux_ids is not None:
        extra["eagle_aux_hidden_state_layer_ids"] = aux_ids
    head_cfg = transformers.LlamaConfig(
        **{k: d[k] for k in _SHAPE if k in d}, num_hidden_layers=1, head_dim=hd,
        architectures=["LlamaForCausalLMEagle3"], **extra,
    )  # fmt: skip
    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) / shape[-1] ** 0.5

    def norm() -> torch.Tensor:
        return 1.0 + 0.1 * torch.randn(h, generator=gen)

    hq, hk, inter = (
        cfg.num_attention_heads * hd,
        cfg.num_key_value_heads * hd,
        cfg.intermediate_size,
    )
    t: dict[str, torch.Tensor] = {
        "midlayer.self_attn.q_proj.weight": rnd(hq, 2 * h),
        "midlayer.self_attn.k_proj.weight": rnd(hk, 2 * h),
        "midlayer.self_attn.v_proj.weight": rnd(hk, 2 * h),
        "midlayer.self_attn.o_proj.weight": rnd(h, hq),
        "midlayer.mlp.gate_proj.weight": rnd(inter, h),
        "midlayer.mlp.up_proj.weight": rnd(inter, h),
        "midlayer.mlp.down_proj.weight": rnd(h, inter),
        "midlayer.input_layernorm.weight": norm(),
        "midlayer.hidden_norm.weight": norm(),
        "midlayer.post_attention_layernorm.weight": norm(),
        "norm.weight": norm(),
        "fc.weight": rnd(h, 3 * h),
        "lm_head.weight": rnd(draft_vocab or v, h) * 4,
    }
    if draft_vocab is not None:
        ids = torch.randperm(v, generator=gen)[:draft_vocab].sort().values
        t["d2t"] = ids - torch.arange(draft_vocab)  # target id = draft id + d2t
        t2d = torch.zeros(v, dtype=torch.bool)
        t2d[ids] = True
        t["t2d"] = t2d
    directory.mkdir(parents=True, exist_ok=True)
    head_cfg.save_pretrained(directory)
    save_file({k: x.contiguous() for k, x in t.items()}, str(directory / "model.safetensors"))
    return directory


class Eagle3Reference:
    """transformers' Llama pieces computing what an EAGLE-3 head must draft."""

    def __init__(self, target: Path, head: Path, aux_ids: list[int]) -> None:
        from transformers.models.llama.modeling_llama import (
            LlamaAttention,
            LlamaMLP,
            LlamaRMSNorm,
            LlamaRotaryEmbedding,
        )

        self.hf, cfg, raw = _reference_parts(target, head)
        w = {k.removeprefix("midlayer."): x for k, x in raw.items()}
        h = cfg.hidden_size
        self.attn = LlamaAttention(cfg, 0).eval()
        for name in ("q_proj", "k_proj", "v_proj"):
            out = w[f"self_attn.{name}.weight"].shape[0]
            setattr(self.attn, name, torch.nn.Linear(2 * h, out, bias=False))
            getattr(self.attn, name).weight.data = w[f"self_attn.{name}.weight"]
        self.attn.o_proj.weight.data = w["self_attn.o_proj.weight"]
        self.mlp = LlamaMLP(cfg).eval()
        for name in ("gate_proj", "up_proj", "down_proj"):
            getattr(self.mlp, name).weight.data = w[f"mlp.{name}.weight"]
        self.norms = {}
        for name in ("input_layernorm", "hidden_norm", "post_attention_layernorm", "norm"):
            n = LlamaRMSNorm(h, cfg.rms_norm_eps)
            n.weight.data = w[f"{name}.weight"]
            self.norms[name] = n
        self.fc, self.lm_head = w["fc.weight"], w["lm_head.weight"]
        self.d2t = w.get("d2t")
        self.aux_ids = aux_ids
        self.rotary = LlamaRotaryEmbedding(cfg)

    @torch.no_grad()
    def _head(self, ids: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = self.norms
        embeds = n["input_layernorm"](self.hf.model.embed_tokens(ids))  # [L, H]
        residual = hidden
        x = torch.cat([embeds, n["hidden_norm"](hidden)], -1)[None]  # [1, L, 2H]
        length = x.shape[1]
        pos = torch.arange(length)[None]
        mask = torch.full((length, length), float("-inf")).triu(1)[None, None]
        attn = self.attn(x, position_embeddings=self.rotary(x, pos), attention_mask=mask)[0][0]
        residual = attn + residual
        pre = self.mlp(n["post_attention_layernorm"](residual)) + residual
        return n["norm"](pre), pre

    def _logits(self, normed: torch.Tensor) -> torch.Tensor:
        logits = normed @ self.lm_head.T  # [V_draft]
        if self.d2t is None:
            return logits
        full = torch.full((self.hf.config.vocab_size,), float("-inf"))
        full[torch.arange(len(self.d2t)) + self.d2t] = logits
        return full

    @torch.no_grad()
    def drafts(self, tokens: list[int], k: int) -> list[int]:
        t = torch.tensor(tokens)
        states = self.hf.model(t[None], output_hidden_states=True).hidden_states
        aux = torch.cat([states[i][0] for i in self.aux_ids], -1)  # [n, 3H]
        hs = (aux @ self.fc.T)[:-1]  # row p: the fused state at p, token p + 1
        ids = t[1:]
        out: list[int] = []
        for _ in range(k):
            normed, pre = self._head(ids, hs)
            nxt = int(self._logits(normed[-1]).argmax())
            out.append(nxt)
            ids = torch.cat([ids, torch.tensor([nxt])])
            hs = torch.cat([hs, pre[-1:]])
        return out
