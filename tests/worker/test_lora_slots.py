"""LoRA on the model runner: a mixed batch (base rows + 3 adapters, ``max_loras=2``, so
slots are evicted and refilled) gives peft's greedy tokens row by row, on Llama, Qwen3 and
a MoE family (attention adapters); base rows never see an adapter. Over a quantized
checkpoint (GPTQ, AWQ, fp8, GGUF) an adapter gives peft's tokens over the dequantized
weights."""

from __future__ import annotations

from pathlib import Path

import pytest

from actorllm.core.lora import LoRARequest
from actorllm.core.request import Request
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler import Scheduler
from actorllm.core.scheduler.config import SchedulerConfig
from actorllm.worker.lora_settings import LoRASettings
from actorllm.worker.lora_slots import TooManyAdaptersError
from actorllm.worker.model_runner import ModelRunner
from tests.helpers.gguf_checkpoints import write_gguf
from tests.helpers.lora import ALL_PROJ, ATTN_PROJ, make_adapter, peft_greedy
from tests.helpers.models import make_tiny_checkpoint
from tests.helpers.quant_checkpoints import write_quantized

PROMPTS = {"base": [1, 5, 9, 13, 17], "a1": [1, 5, 9, 13, 17], "a2": [4, 8, 2, 7],
           "a3": [1, 5, 9, 13, 17], "base2": [4, 8, 2, 7]}  # fmt: skip
MAX_TOKENS = 6


Loras = dict[str, LoRARequest | None]


def _serve(base: Path, loras: Loras, max_loras: int) -> dict[str, list[int]]:
    """Greedy tokens of each row of ``loras`` (its adapter, or None) over ``base``."""
    runner = ModelRunner(
        base, dtype="float32", max_model_len=128, max_num_batched_tokens=256,
        lora=LoRASettings(max_loras=max_loras, max_lora_rank=16, max_cpu_loras=2),
    )  # fmt: skip
    runner.load_model()
    runner.initialize_kv_cache(64)
    sched = Scheduler(SchedulerConfig(max_model_len=128, num_blocks=64, max_loras=max_loras,
                                      max_num_batched_tokens=256))  # fmt: skip
    for rid, lora in loras.items():
        params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
        sched.add_request(Request(rid, PROMPTS[rid], params, lora_request=lora))
    out: dict[str, list[int]] = {rid: [] for rid in loras}
    for _ in range(100):
        if not sched.has_unfinished_requests():
            break
        so = sched.schedule()
        adapters = {lo.lora_name for r in so.num_scheduled_tokens if (lo := loras[r]) is not None}
        assert len(adapters) <= max_loras
        for o in sched.update_from_output(so, runner.execute(so)).outputs:
            out[o.req_id] += o.new_token_ids
    return out


@pytest.mark.parametrize(
    ("family", "targets"),
    [("llama", ALL_PROJ), ("qwen3", ALL_PROJ), ("qwen3_moe", ATTN_PROJ)],
)
def test_mixed_batch_equals_peft_row_by_row(
    tmp_path: Path, family: str, targets: tuple[str, ...]
) -> None:
    base = make_tiny_checkpoint(tmp_path / "base", family)  # type: ignore[arg-type]
    adapters = {
        f"a{i}": make_adapter(
            base, tmp_path / f"a{i}", targets=targets, r=4 * i, seed=i, use_rslora=i == 2
        )
        for i in (1, 2, 3)
    }
    loras: dict[str, LoRARequest | None] = {"base": None, "base2": None}
    loras.update({n: LoRARequest(n, i + 1, str(p)) for i, (n, p) in enumerate(adapters.items())})
    got = _serve(base, loras, max_loras=2)
    rows = {r: (None if lo is None else lo.lora_path, PROMPTS[r]) for r, lo in loras.items()}
    assert got == peft_greedy(base, rows, MAX_TOKENS)
    assert got["base"] != got["a1"]  # the adapters really change the outputs


def test_base_rows_get_no_adapter_when_slots_are_full(tmp_path: Path) -> None:
    """vLLM's CPU ops index slot -1 for base rows (the last slot): ours adds nothing."""
    base = make_tiny_checkpoint(tmp_path / "base", "llama")
    a1 = make_adapter(base, tmp_path / "a1", seed=3)
    loras: dict[str, LoRARequest | None] = {"a1": LoRARequest("a1", 1, str(a1)), "base": None}
    got = _serve(base, loras, max_loras=1)  # the only (= last) slot holds a1
    assert got["base"] == peft_greedy(base, {"b": (None, PROMPTS["base"])}, MAX_TOKENS)["b"]


def test_more_adapters_than_slots_in_one_step_is_refused(tmp_path: Path) -> None:
    base = make_tiny_checkpoint(tmp_path / "base", "llama")
    a1 = make_adapter(base, tmp_path / "a1", seed=3)
    runner = ModelRunner(base, dtype="float32", max_model_len=64,
                         lora=LoRASettings(max_loras=1))  # fmt: skip
    runner.load_model()
    assert runner.lora is not None
    import numpy as np

    two = [LoRARequest("x", 1, str(a1)), LoRARequest("y", 2, str(a1))]
    with pytest.raises(TooManyAdaptersError):
        runner.lora.prepare(two, np.array([1, 1]), runner.device)


@pytest.mark.usefixtures("float_inputs")
@pytest.mark.parametrize(
    ("method", "kw"),
    [("gptq", dict(bits=4, desc_act=True)), ("awq", {}), ("fp8", dict(block=(32, 32))),
     ("gguf", dict(qtype="Q4_0"))],
)  # fmt: skip
def test_an_adapter_over_a_quantized_checkpoint_equals_peft_over_its_weights(
    tmp_path: Path, method: str, kw: dict[str, object]
) -> None:
    """The hook adds the adapter to what the packed weight's kernel computed; the reference
    is peft over the checkpoint holding the dequantized weights."""
    if method == "gguf":
        ref, model = write_gguf(tmp_path, "qwen3", **kw)  # type: ignore[arg-type]
    else:
        ref, model = write_quantized(tmp_path, method, **kw)  # type: ignore[arg-type]
    adapter = make_adapter(ref, tmp_path / "a1", targets=ALL_PROJ, r=8, seed=1)
    loras: Loras = {"base": None, "a1": LoRARequest("a1", 1, str(adapter))}
    got = _serve(model, loras, max_loras=1)
    rows = {r: (None if lo is None else lo.lora_path, PROMPTS[r]) for r, lo in loras.items()}
    assert got == peft_greedy(ref, rows, MAX_TOKENS)
    assert got["base"] != got["a1"]


def test_a_pinned_adapter_stays_resident_and_is_never_evicted(tmp_path: Path) -> None:
    import numpy as np

    base = make_tiny_checkpoint(tmp_path / "base", "llama")
    paths = {n: make_adapter(base, tmp_path / n, seed=i) for i, n in enumerate("abc")}
    reqs = {n: LoRARequest(n, i + 1, str(p)) for i, (n, p) in enumerate(paths.items())}
    runner = ModelRunner(base, dtype="float32", max_model_len=64,
                         lora=LoRASettings(max_loras=2, max_cpu_loras=2))  # fmt: skip
    runner.load_model()
    slots = runner.lora
    assert slots is not None
    with pytest.raises(ValueError, match="'a' is not loaded"):
        runner.pin_lora("a")
    for r in reqs.values():
        runner.add_lora(r)
    assert runner.pin_lora("a") is True and "a" in slots.slot_names  # resident at once
    one = np.array([1])
    for name in "bcbc":  # without the pin, b and c would evict a from its slot
        slots.prepare([reqs[name]], one, runner.device)
        assert "a" in slots.slot_names and "a" in slots.host  # the host cache keeps it too
    with pytest.raises(TooManyAdaptersError, match="beside 1 pinned"):
        slots.prepare([reqs["b"], reqs["c"]], np.array([1, 1]), runner.device)
    runner.pin_lora("b")
    with pytest.raises(ValueError, match="max_loras=2 slots already holds a pinned"):
        runner.pin_lora("c")
    runner.remove_lora("a")  # removing unpins
    assert slots.pinned == {"b"}
