"""Train the shipped demo model (actorllm/demo/weights/) on the demo tokenizer's corpus.

Theory of operation: the corpus is the one ``scripts/train_demo_tokenizer.py`` builds
offline (Python standard-library docstrings and source, plus a short hand-written text),
tokenized with the shipped tokenizer into one stream, documents separated by
``<|endoftext|>``. A small Llama (``SHAPE`` below, tied embeddings) is trained on random
windows of ``CONTEXT`` tokens with AdamW and a cosine schedule, on ONE CPU thread with a fixed
seed, so a re-run on the same machine and library versions gives the same weights. The
weights are saved in bfloat16 (half the bytes; the config says float32, so actorllm and
transformers compute in float32 after loading).

The result is not a useful model: it writes text that reads like English prose or Python
(final training loss about 3.8 nats/token on a 490k-token corpus), which is all
``make serve`` needs to show. Training is about 0.9 s per step on one free core (15 minutes;
the shipped run took 56 minutes of wall time on a busy shared machine).

Usage (the exact command that produced the shipped weights, CPython 3.11.7, torch 2.13.0
CPU, transformers 5.x)::

    OMP_NUM_THREADS=1 .venv/bin/python scripts/train_demo_model.py --steps 1000 --batch 8

It writes config.json, generation_config.json and model.safetensors to ``--out``
(default ``actorllm/demo/weights``), and prints the loss every 50 steps.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[1]
TOKENIZER_DIR = ROOT / "actorllm" / "demo" / "tokenizer"
SEED = 0
CONTEXT = 256
EOS, IM_END = 0, 2  # <|endoftext|> and <|im_end|> in the demo tokenizer

SHAPE: dict[str, int] = {
    "hidden_size": 256,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 640,
    "max_position_embeddings": 4096,
}


def _tokenizer_script() -> object:
    spec = importlib.util.spec_from_file_location(
        "_tok", ROOT / "scripts" / "train_demo_tokenizer.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def token_stream() -> torch.Tensor:
    """The corpus as one 1-D int64 tensor of token ids, documents joined by EOS."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json"))
    texts: list[str] = _tokenizer_script().corpus()  # type: ignore[attr-defined]
    ids: list[int] = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        ids.extend(enc.ids)
        ids.append(EOS)
    return torch.tensor(ids, dtype=torch.int64)


def model_config(vocab_size: int) -> dict[str, object]:
    """config.json in transformers' Llama format, tied head (untied would double the bytes)."""
    from actorllm.models.config import llama_config_json

    return llama_config_json(
        {"vocab_size": vocab_size, **SHAPE}, tie_word_embeddings=True, eos_token_id=EOS
    )


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def train(steps: int, batch: int, peak_lr: float) -> tuple[dict[str, object], torch.nn.Module]:
    import transformers

    torch.manual_seed(SEED)
    stream = token_stream()
    cfg = model_config(_vocab_size())
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg)).float().train()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"corpus {stream.numel()} tokens, model {n_params / 1e6:.2f}M parameters", flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=peak_lr,
        betas=(0.9, 0.95),
    )
    gen = torch.Generator().manual_seed(SEED)
    start = time.monotonic()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, peak_lr, warmup=min(100, steps // 10))
        # x, y: [batch, CONTEXT] int64, y shifted by one token
        offsets = torch.randint(0, stream.numel() - CONTEXT - 1, (batch,), generator=gen)
        window = torch.stack([stream[o : o + CONTEXT + 1] for o in offsets.tolist()])
        logits = model(input_ids=window[:, :-1]).logits  # [batch, CONTEXT, vocab]
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), window[:, 1:].reshape(-1)
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            elapsed = time.monotonic() - start
            print(f"step {step:5d}  loss {loss.item():.3f}  {elapsed:7.1f}s", flush=True)
    return cfg, model.eval()


def _vocab_size() -> int:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json"))
    return int(tok.get_vocab_size(with_added_tokens=True))


def save(out: Path, cfg: dict[str, object], model: torch.nn.Module) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    gen = {"eos_token_id": [EOS, IM_END], "pad_token_id": EOS}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    # Tied head: only the embedding is stored (transformers and actorllm tie it on load).
    tensors = {
        name: p.detach().to(torch.bfloat16).contiguous()
        for name, p in model.state_dict().items()
        if name != "lm_head.weight"
    }
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "actorllm" / "demo" / "weights")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    cfg, model = train(args.steps, args.batch, args.lr)
    save(args.out, cfg, model)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
