"""``ScriptedModel``: a model runner with no weights, for tests and overhead benchmarks.

Structured outputs: a step's grammar bitmask is honoured like the real sampler does — the
scripted token when the grammar allows it, else an allowed token picked by the same
context hash (min_tokens removes stop tokens unless the grammar allows nothing else).

It satisfies the same :class:`~actorllm.worker.runner.Runner` protocol as
:class:`actorllm.worker.model_runner.ModelRunner` (``launch`` computes the step at once:
``execute(SchedulerOutput) -> ModelRunnerOutput``, handed back done), with no device, no
weights and no KV tensors, and keeps the same persistent per-request state, but the next
token is a pure function of the context: the same context always yields the same token,
whatever the batch, the chunking, a preemption or an engine recovery. That makes "the
outputs are identical to a fault-free run" a sharp check.

    model = ScriptedModel(vocab_size=4096, step_delay_s=0.001)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from actorllm.core.lora import LoRARequest
from actorllm.core.model_runner_output import ModelRunnerOutput, TokenLogprobs
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler_output import SchedulerOutput
from actorllm.worker.runner import FinishedStep, KVCacheTensors, Runner
from actorllm.worker.sleep_tags import sleep_parts, to_wake

if TYPE_CHECKING:
    import torch

    from actorllm.distributed.comm import GlooComm

_MIX = 0x9E3779B97F4A7C15
_MASK = (1 << 64) - 1


@dataclass
class _ReqState:
    tokens: list[int]  # prompt + outputs known to this runner
    prompt_len: int
    params: SamplingParams
    eos_token_id: int | None
    num_computed: int = 0
    block_ids: list[int] = field(default_factory=list)
    lora_id: int = 0  # the adapter's lora_int_id (0: the base model)


@dataclass(frozen=True)
class ScriptedModelConfig:
    """What the engine reads off a runner's model (the real runner's config has more)."""

    vocab_size: int
    eos_token_id: int | None
    max_model_len: int

    @property
    def eos_token_ids(self) -> list[int]:
        return [] if self.eos_token_id is None else [self.eos_token_id]


class ScriptedModel:
    """Deterministic fake runner. ``first_token_id`` keeps special tokens out of the output
    (they would vanish in detokenization); ``eos_period`` makes roughly one context in that
    many end with EOS (None: never); ``step_delay_s`` simulates model time per step."""

    def __init__(
        self,
        *,
        vocab_size: int = 4096,
        eos_token_id: int | None = 0,
        first_token_id: int = 3,
        max_model_len: int = 4096,
        step_delay_s: float = 0.0,
        eos_period: int | None = None,
        kv_bytes_per_block: int = 1024,
    ) -> None:
        self.model_config = ScriptedModelConfig(vocab_size, eos_token_id, max_model_len)
        self.first_token_id = first_token_id
        self.step_delay_s = step_delay_s
        self.eos_period = eos_period
        self._kv_bytes_per_block = kv_bytes_per_block
        self._first_token_id = first_token_id
        self.num_blocks = 0
        self.sleeping = 0  # sleep level, 0 = awake
        self.asleep: frozenset[str] = frozenset()  # sleep tags still asleep
        self._reqs: dict[str, _ReqState] = {}  # {req_id: state}
        self.steps_executed = 0
        # What a real runner has and this one has not (worker/runner.py): no weights, no
        # KV tensors (the offload store keeps placeholders), no tensor-parallel group.
        self.model: torch.nn.Module | None = None
        self.kv_caches: KVCacheTensors | None = None
        self.comm: GlooComm | None = None
        # LoRA: an adapter shifts the scripted tokens by its lora_int_id, so a test sees
        # which adapter each row ran with.
        self.loras: dict[str, LoRARequest] = {}

    # The width of the embedding prompts it accepts (their rows are not read: the script
    # decides the tokens), so embedding requests go through the engine like any other.
    EMBEDS_HIDDEN_SIZE = 8

    def prompt_embeds_spec(self) -> tuple[int, object]:
        import torch

        return self.EMBEDS_HIDDEN_SIZE, torch.float32

    def fresh(self) -> ScriptedModel:
        """A new runner with the same settings and no state (one per data-parallel replica:
        each replica's worker thread needs its own)."""
        mc = self.model_config
        return ScriptedModel(
            vocab_size=mc.vocab_size,
            eos_token_id=mc.eos_token_id,
            first_token_id=self._first_token_id,
            max_model_len=mc.max_model_len,
            step_delay_s=self.step_delay_s,
            eos_period=self.eos_period,
            kv_bytes_per_block=self._kv_bytes_per_block,
        )

    # -- the runner protocol --------------------------------------------------------------

    def load_model(self) -> None:
        pass

    @property
    def kv_group_windows(self) -> tuple[int | None, ...]:
        return (None,)  # one full-attention group

    def kv_cache_bytes_per_block(self) -> int:
        return self._kv_bytes_per_block

    def profile_num_blocks(self, gpu_memory_utilization: float) -> None:
        return None  # no device memory: the byte budget sizes the cache

    def initialize_kv_cache(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks

    def reset_requests(self) -> None:
        self._reqs.clear()

    def sleep(self, level: int, tags: Sequence[str] | None = None) -> None:
        self.sleeping = level
        self.asleep = sleep_parts(tags)
        self._reqs.clear()

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """Tags as the model runner's: asleep until both the weights and the KV cache woke."""
        if not self.sleeping:
            return
        self.asleep -= to_wake(self.asleep, tags)
        if not self.asleep:
            self.sleeping = 0

    def release(self) -> None:
        pass  # nothing held: no weights, no KV cache

    def statistics(self) -> dict[str, object]:
        return {}

    def add_lora(self, request: LoRARequest) -> bool:
        if not Path(request.lora_path).is_dir():
            raise ValueError(
                f"LoRA adapter {request.lora_name!r}: {request.lora_path!r} is not a directory"
            )
        added = request.lora_name not in self.loras
        self.loras[request.lora_name] = request
        return added

    def remove_lora(self, name: str) -> bool:
        return self.loras.pop(name, None) is not None

    def pin_lora(self, name: str) -> bool:
        if name not in self.loras:
            raise ValueError(f"Pinning failed: LoRA adapter {name!r} is not loaded.")
        return True  # no slots to keep it in

    def list_loras(self) -> list[str]:
        return list(self.loras)

    def launch(self, so: SchedulerOutput) -> FinishedStep:
        """Compute the step now (:meth:`execute`); its handle is done."""
        return FinishedStep(self.execute(so))

    def execute(self, so: SchedulerOutput) -> ModelRunnerOutput:
        if self.sleeping:
            raise RuntimeError("execute() called while the model is asleep")
        t0 = time.perf_counter()
        for req_id in (*so.finished_req_ids, *so.preempted_req_ids):
            self._reqs.pop(req_id, None)
        for new in so.scheduled_new_reqs:
            self._reqs[new.req_id] = _ReqState(
                tokens=[*new.prompt_token_ids, *new.output_token_ids],
                prompt_len=len(new.prompt_token_ids),
                params=new.sampling_params,
                eos_token_id=new.eos_token_id,
                num_computed=new.num_computed_tokens,
                block_ids=list(new.block_ids[0]),
                lora_id=0 if new.lora_request is None else new.lora_request.lora_int_id,
            )
        for cached in so.scheduled_cached_reqs:
            state = self._reqs[cached.req_id]
            state.block_ids.extend(cached.new_block_ids[0])
            state.num_computed = cached.num_computed_tokens
        allowed = self._grammar_rows(so)
        req_ids: list[str] = []
        sampled: list[list[int]] = []
        logprobs: dict[str, TokenLogprobs] = {}
        prompt_logprobs: dict[str, list[TokenLogprobs]] = {}
        for req_id, n in so.num_scheduled_tokens.items():
            state = self._reqs[req_id]
            start, end = state.num_computed, state.num_computed + n
            req_ids.append(req_id)
            if state.params.prompt_logprobs is not None and start < state.prompt_len:
                prompt_logprobs[req_id] = [
                    self._fake_logprobs(state.tokens[p], state.params.prompt_logprobs)
                    for p in range(max(start, 1), min(end, state.prompt_len))
                ]
            state.num_computed = end
            if end < len(state.tokens):
                sampled.append([])  # a prefill chunk that stops inside the known tokens
                continue
            token = self.next_token(state.tokens, state, allowed.get(req_id))
            state.tokens.append(token)
            sampled.append([token])
            if state.params.num_logprobs is not None:
                logprobs[req_id] = self._fake_logprobs(
                    token, state.params.num_logprobs, state.params.logprob_token_ids
                )
        if self.step_delay_s:
            time.sleep(self.step_delay_s)
        self.steps_executed += 1
        return ModelRunnerOutput(
            step_id=so.step_id,
            req_ids=req_ids,
            sampled_token_ids=sampled,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
            execute_time_s=time.perf_counter() - t0,
        )

    # -- the script -----------------------------------------------------------------------

    def script(self, context: Sequence[int]) -> int:
        """The token this model emits after ``context`` (ignoring EOS and min_tokens)."""
        h = len(context) * _MIX & _MASK
        for t in context[-4:]:
            h = ((h ^ t) * _MIX + 1) & _MASK
        h ^= h >> 29
        if (
            self.eos_period
            and self.model_config.eos_token_id is not None
            and h % self.eos_period == 0
        ):
            return self.model_config.eos_token_id
        span = self.model_config.vocab_size - self.first_token_id
        return self.first_token_id + (h >> 7) % span

    def next_token(
        self,
        context: Sequence[int],
        state: _ReqState | None = None,
        grammar_allowed: list[int] | None = None,
    ) -> int:
        token = self.script(context)
        if state is not None and state.lora_id:
            span = self.model_config.vocab_size - self.first_token_id
            token = self.first_token_id + (token - self.first_token_id + 7 * state.lora_id) % span
        if state is not None:
            params = state.params
            num_outputs = len(context) - state.prompt_len
            stops = params.all_stop_token_ids(state.eos_token_id)
            if grammar_allowed is not None:
                if num_outputs < params.min_tokens:
                    grammar_allowed = [t for t in grammar_allowed if t not in stops] or (
                        grammar_allowed
                    )
                if token not in grammar_allowed:
                    token = grammar_allowed[token % len(grammar_allowed)]
                return token
            if num_outputs < params.min_tokens and token in stops:
                token = self.first_token_id + token % 7  # min_tokens masks EOS and stop ids
            if params.allowed_token_ids and token not in params.allowed_token_ids:
                token = params.allowed_token_ids[token % len(params.allowed_token_ids)]
        return token

    def _grammar_rows(self, so: SchedulerOutput) -> dict[str, list[int]]:
        """{req_id: token ids its grammar allows this step}."""
        g = so.grammar_bitmask
        if g is None:
            return {}
        vocab = self.model_config.vocab_size
        bits = np.unpackbits(
            np.ascontiguousarray(g.array()).view(np.uint8), axis=1, bitorder="little"
        )[:, :vocab]  # [R, V]
        return {rid: np.flatnonzero(bits[i]).tolist() for i, rid in enumerate(g.req_ids)}

    def _fake_logprobs(self, token: int, k: int, ids: list[int] | None = None) -> TokenLogprobs:
        top = ids or [(token + i) % self.model_config.vocab_size for i in range(1, k + 1)]
        return TokenLogprobs(
            token_ids=[token, *top],
            logprobs=[-0.5, *(-1.0 - i for i in range(k))],
            rank=1,
        )


def _conforms(model: ScriptedModel) -> Runner:
    return model  # mypy: ScriptedModel satisfies the Runner protocol
