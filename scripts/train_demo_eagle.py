"""Train an EAGLE head for the demo model: a drafter that is right often enough to measure
what EAGLE gains (random heads only show what drafting costs).

Theory of operation: EAGLE-1's recipe at demo scale. Windows of the demo corpus
(``scripts/train_demo_model.py``'s token stream) go through the frozen demo model; its final
hidden states ``h`` and its greedy next tokens are the teacher. Row ``p`` of the head takes
``[embed(token p + 1); h_p]`` (plus a little noise on ``h``, as EAGLE trains it), and is trained
to give the target's greedy token after ``p + 1`` through the target's own LM head (cross
entropy), and to reproduce ``h_{p+1}`` (smooth L1, weight 0.1), so that a further draft,
which feeds the head's output back as the hidden state, stays in range. One Llama decoder
layer without its input norm, fc [2H -> H] without bias; saved in SafeAILab's layout
(``fc.weight``, ``layers.0.*``), which actorllm and vLLM both load. Deterministic on one
thread.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/train_demo_eagle.py --steps 400 \\
        --out ~/.cache/actorllm/demo-eagle
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[1]


def _token_stream() -> torch.Tensor:
    spec = importlib.util.spec_from_file_location("_demo", ROOT / "scripts" / "train_demo_model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.token_stream()  # type: ignore[no-any-return]


def train(out: Path, steps: int = 400, batch: int = 16, context: int = 128) -> Path:
    import transformers
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    from actorllm.demo import demo_model_path

    torch.manual_seed(0)
    target_dir = demo_model_path()
    target = transformers.AutoModelForCausalLM.from_pretrained(
        target_dir, dtype=torch.float32, attn_implementation="sdpa"
    ).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    cfg = transformers.AutoConfig.from_pretrained(target_dir)
    d = cfg.to_dict()
    shape = ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads",
             "num_key_value_heads", "head_dim", "rms_norm_eps", "max_position_embeddings",
             "rope_parameters", "hidden_act")  # fmt: skip
    head_cfg = transformers.LlamaConfig(
        **{k: d[k] for k in shape if k in d}, num_hidden_layers=1,
        architectures=["LlamaForCausalLM"],
    )  # fmt: skip
    head_cfg._attn_implementation = "sdpa"
    h = cfg.hidden_size
    layer = LlamaDecoderLayer(head_cfg, 0)
    layer.input_layernorm = torch.nn.Identity()  # type: ignore[assignment]
    fc = torch.nn.Linear(2 * h, h, bias=False)
    rotary = LlamaRotaryEmbedding(head_cfg)
    params = [*layer.parameters(), *fc.parameters()]
    opt = torch.optim.AdamW(params, lr=2e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-3, total_steps=steps)
    stream = _token_stream()
    gen = torch.Generator().manual_seed(0)
    pos = torch.arange(context - 1)[None]
    t0 = time.perf_counter()
    for step in range(steps):
        starts = torch.randint(0, len(stream) - context, (batch,), generator=gen)
        ids = torch.stack([stream[s : s + context] for s in starts.tolist()])  # [B, C]
        with torch.no_grad():
            hid = target.model(ids).last_hidden_state  # [B, C, H], final norm applied
            teacher = target.lm_head(hid).argmax(-1)  # [B, C]: the target's next token
        noisy = hid[:, :-1] + 0.05 * torch.randn(hid[:, :-1].shape, generator=gen)
        x = fc(torch.cat([target.model.embed_tokens(ids[:, 1:]), noisy], -1))  # [B, C-1, H]
        y = layer(x, position_embeddings=rotary(x, pos), position_ids=pos, attention_mask=None)
        y = y[0] if isinstance(y, tuple) else y  # [B, C-1, H]
        logits = target.lm_head(y)  # row p predicts the target's token after p + 1
        ce = torch.nn.functional.cross_entropy(logits.flatten(0, 1), teacher[:, 1:].flatten())
        feat = torch.nn.functional.smooth_l1_loss(y, hid[:, 1:])
        loss = ce + 0.1 * feat
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 50 == 0 or step == steps - 1:
            acc = (logits.argmax(-1) == teacher[:, 1:]).float().mean().item()
            print(f"step {step} ce {ce.item():.3f} feat {feat.item():.4f} top1 {acc:.3f} "
                  f"{time.perf_counter() - t0:.0f}s", flush=True)  # fmt: skip
    kept = {k: v for k, v in layer.state_dict().items() if not k.startswith("input_layernorm")}
    tensors = {f"layers.0.{k}": v.detach().to(torch.bfloat16).contiguous() for k, v in kept.items()}
    tensors["fc.weight"] = fc.weight.detach().to(torch.bfloat16).contiguous()
    out.mkdir(parents=True, exist_ok=True)
    head_cfg.save_pretrained(out)
    save_file(tensors, str(out / "model.safetensors"))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--out", type=Path, default=Path.home() / ".cache/actorllm/demo-eagle")
    args = p.parse_args()
    print(train(args.out, args.steps, args.batch))


if __name__ == "__main__":
    main()
