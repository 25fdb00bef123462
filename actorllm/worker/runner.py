"""``Runner``: what the worker thread calls on a model runner, as one protocol.

:class:`~actorllm.worker.model_runner.ModelRunner` (a real model on a device) and
:class:`~actorllm.testing.scripted_model.ScriptedModel` (no weights, for tests and
overhead benchmarks) both satisfy it; mypy checks each structurally
(``_conforms`` at the end of their modules). The worker (worker/worker.py), its step
pipeline (worker/step_pipeline.py), the start-up (worker/startup.py) and the KV offload
store (worker/offload_store.py) call nothing else on a runner, and never probe it: a
capability one runner lacks is a member with a stated "none" answer (``profile_num_blocks``
returns None, ``model`` and ``kv_caches`` are None, ``launch`` of a runner that computes
the step at once returns a :class:`FinishedStep`).

    runner.load_model()
    runner.initialize_kv_cache(512)
    handle = runner.launch(scheduler_output)   # returns once the step is queued
    handle.done(), handle.result()             # -> ModelRunnerOutput
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, final, runtime_checkable

from actorllm.core.lora import LoRARequest
from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.scheduler_output import SchedulerOutput

if TYPE_CHECKING:
    import torch

    from actorllm.distributed.comm import GlooComm

# Per layer (k_cache, v_cache), each [num_blocks, block_size, num_kv_heads, head_dim].
KVCacheTensors = Sequence[tuple["torch.Tensor", "torch.Tensor"]]


class RunnerModelConfig(Protocol):
    """What the engine reads off a runner's model (the real config has much more)."""

    @property
    def vocab_size(self) -> int: ...

    @property
    def max_model_len(self) -> int: ...

    @property
    def eos_token_ids(self) -> Sequence[int]: ...


class StepHandle(Protocol):
    """A launched step: ``done()`` says whether ``result()`` would return without waiting
    on the device; ``result()`` waits for the step's sampled ids. Idempotent."""

    def done(self) -> bool: ...

    def result(self) -> ModelRunnerOutput: ...


@final
class FinishedStep:
    """The handle of a step its runner computed at launch (on the host, no device queue)."""

    def __init__(self, output: ModelRunnerOutput) -> None:
        self._output = output

    def done(self) -> bool:
        return True

    def result(self) -> ModelRunnerOutput:
        return self._output


@runtime_checkable
class Runner(Protocol):
    """A model runner, driven from the worker thread only; every method blocks it.

    Start-up: :meth:`load_model`, then the KV block count (:meth:`profile_num_blocks` on a
    device, else a byte budget over :meth:`kv_cache_bytes_per_block`), then
    :meth:`initialize_kv_cache`. Steps: :meth:`launch` (resolved in launch order). Between
    steps: :meth:`reset_requests`, :meth:`sleep` / :meth:`wake_up`, :meth:`release` once
    the engine closes."""

    @property
    def model_config(self) -> RunnerModelConfig: ...

    @property
    def kv_group_windows(self) -> tuple[int | None, ...]:
        """Each KV cache group's sliding window (None: full attention)."""
        ...

    @property
    def model(self) -> torch.nn.Module | None:
        """The weights (``collective_rpc("get_model")``); None without any (asleep at level
        2, or a runner without weights)."""
        ...

    @property
    def kv_caches(self) -> KVCacheTensors | None:
        """The paged KV tensors the offload store copies; None: a runner without KV tensors
        (an empty sequence: it has some, but none allocated now)."""
        ...

    @property
    def comm(self) -> GlooComm | None:
        """Tensor parallel: this rank's collectives (their statistics); else None."""
        ...

    def load_model(self) -> None: ...

    def kv_cache_bytes_per_block(self) -> int: ...

    def profile_num_blocks(self, gpu_memory_utilization: float) -> int | None:
        """How many KV blocks fit in that share of the device's memory; None: the runner
        has no device memory to measure (the byte budget decides)."""
        ...

    def initialize_kv_cache(self, num_blocks: int) -> None: ...

    def launch(self, so: SchedulerOutput) -> StepHandle:
        """Queue one step; raises what the step would raise when it cannot be queued."""
        ...

    def reset_requests(self) -> None: ...

    def sleep(self, level: int, tags: Sequence[str] | None = None) -> None:
        """Free memory while idle (level 1: the KV cache, weights kept in host memory;
        level 2: both). ``tags`` ``["kv_cache"]``: the KV cache alone, the weights stay
        where they are (vLLM's ``release_kv_cache_memory``); None: what the level says."""
        ...

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """Restore what ``tags`` names ("weights", "kv_cache": worker/sleep_tags.py; None:
        both); steps are refused until both are back."""
        ...

    def release(self) -> None:
        """The engine closed: free the KV cache and the weights now."""
        ...

    def statistics(self) -> Mapping[str, object]: ...

    def add_lora(self, request: LoRARequest) -> bool:
        """Load a LoRA adapter (raises ``ValueError`` naming it); False: already loaded."""
        ...

    def remove_lora(self, name: str) -> bool:
        """Forget a LoRA adapter; False: it was not loaded."""
        ...

    def pin_lora(self, name: str) -> bool:
        """Keep a loaded adapter resident until removed (``ValueError`` naming why not)."""
        ...

    def list_loras(self) -> list[str]:
        """The LoRA adapters loaded, oldest first."""
        ...
