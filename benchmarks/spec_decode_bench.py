"""Batch-1 inter-token latency with and without ngram speculation (k=4), on an editing
workload: the prompt holds the model's own greedy continuation (P + C + P), so lookups can
hit. Random weights (load_format dummy, bfloat16), a Qwen3 shape.

    PYTHONPATH=. python benchmarks/spec_decode_bench.py 0.6b 32   # or 75m
"""

from __future__ import annotations

import json
import sys
import time

import anyio

from actorllm.bench.presets import _QWEN3_75M, preset_model_dir
from actorllm.core.sampling_params import SamplingParams
from actorllm.engine import AsyncEngine

Q06 = {**_QWEN3_75M, "vocab_size": 151936, "hidden_size": 1024, "num_hidden_layers": 28,
       "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
       "intermediate_size": 3072, "tie_word_embeddings": True}  # fmt: skip
SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2,
        "prompt_lookup_max": 5}  # fmt: skip
KW = {"load_format": "dummy", "dtype": "bfloat16", "max_model_len": 1024,
      "kv_cache_memory_bytes": 256 * 2**20}  # fmt: skip


async def _gen(eng: AsyncEngine, ids: list[int], n: int) -> tuple[list[int], float]:
    """Greedy tokens and seconds per token after the first."""
    params = SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)
    first = None
    async for out in eng.generate({"prompt_token_ids": ids}, params):
        first = first or time.perf_counter()
        last = out
    return list(last.outputs[0].token_ids), (time.perf_counter() - first) / (n - 1)


async def main(shape_name: str, n: int) -> dict[str, object]:
    shape = Q06 if shape_name == "0.6b" else _QWEN3_75M
    model = str(preset_model_dir("spec-" + shape_name, shape))
    prompt = [100 + (i * 37) % 3000 for i in range(64)]
    async with AsyncEngine.open(model, **KW) as eng:
        cont, _ = await _gen(eng, prompt, n)
        edit = prompt + cont + prompt
        plain, _ = await _gen(eng, edit, n)
        _, itl_plain = await _gen(eng, edit, n)  # warm
    async with AsyncEngine.open(model, speculative_config=SPEC, **KW) as eng:
        spec, _ = await _gen(eng, edit, n)
        _, itl_spec = await _gen(eng, edit, n)
        st = await eng.get_stats()
    return {
        "shape": shape_name, "output_len": n, "same_tokens": plain == spec,
        "itl_plain_ms": itl_plain * 1e3, "itl_spec_ms": itl_spec * 1e3,
        "ratio": itl_spec / itl_plain, "draft_tokens": st.spec_decode_num_draft_tokens,
        "accepted_tokens": st.spec_decode_num_accepted_tokens,
    }  # fmt: skip


if __name__ == "__main__":
    print(json.dumps(anyio.run(main, sys.argv[1], int(sys.argv[2]), backend="trio")))
