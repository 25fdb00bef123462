"""``ModelRunner``: the one object the executor actor drives, from its worker thread.

It owns the model, the paged KV cache tensors, the persistent :class:`InputBatch` and the
:class:`Sampler`. Every method blocks the calling thread (model loading, a forward pass) and
touches no event loop, so it must be called from the executor's dedicated thread only.

    runner = ModelRunner(path, dtype="float32", max_model_len=2048)
    runner.load_model()
    runner.initialize_kv_cache(num_blocks=512)   # block 0 is the null block
    out = runner.execute(scheduler_output)       # -> ModelRunnerOutput

    # Async scheduling: launch step N+1 before reading step N's tokens.
    p0 = runner.launch(so0)
    p1 = runner.launch(so1)    # placeholders in so1 are filled on the device from p0
    out0, out1 = p0.result(), p1.result()

On CUDA a step's inputs go through pinned staging buffers on a copy stream, decode batches
replay CUDA graphs, and the host waits only on per-step events (``docs/gpu.md``). On CPU
the same code runs with no-op streams, plain tensors and no graphs.

This module is the step path; the set-up it calls lives beside it: ``rank_config.py`` (the
rank's model config), ``model_load.py`` (the weights), ``kv_cache.py`` /
``memory_profile.py`` / ``cuda_graphs.py`` (the cache, its size, the graphs over it),
``request_adapters.py`` (LoRA), ``group_binding.py`` (TP/PP), ``sleep_memory.py`` and
``spec_decode/build.py`` (the proposer).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from actorllm.core.lora import LoRARequest
from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.scheduler_output import SchedulerOutput
from actorllm.core.watermark_config import WatermarkConfig
from actorllm.kernels.kv_quant import cache_dtype
from actorllm.kernels.ops import get_ops, resolve_backend
from actorllm.models.base import CausalLM
from actorllm.models.loader import LoadFormat, resolve_dtype
from actorllm.models.pipeline import stage_kv_config
from actorllm.models.quant.apply import checkpoint_quantization
from actorllm.models.quant.experts import quantized_experts
from actorllm.models.routed_capture import attach_recorder, check_routed_capture
from actorllm.worker.cuda_graphs import capture_decode_graphs
from actorllm.worker.decoder_pooling import decoder_pooling_head, run_pooling_step
from actorllm.worker.device_streams import CudaStreams
from actorllm.worker.group_binding import bind_group
from actorllm.worker.input_batch import InputBatch
from actorllm.worker.kv_cache import (
    KVCaches,
    allocate_kv_caches,
    kv_cache_bytes_per_block,
    kv_cache_groups,
    kv_layout,
)
from actorllm.worker.logitsprocs.state import BatchProcessors
from actorllm.worker.lora_settings import LoRASettings
from actorllm.worker.lora_slots import LoRASlots
from actorllm.worker.memory_profile import KVCacheMemoryError, dummy_forward, measure_num_blocks
from actorllm.worker.model_load import load_runner_model
from actorllm.worker.pooling_head import PoolingHead
from actorllm.worker.rank_config import rank_model_config
from actorllm.worker.request_adapters import RequestAdapters
from actorllm.worker.runner import Runner
from actorllm.worker.sampler import Sampler
from actorllm.worker.sampling_metadata import needs_token_history
from actorllm.worker.sleep_memory import free_device_memory, weights_to_device, weights_to_host
from actorllm.worker.sleep_tags import KV_CACHE, WEIGHTS, sleep_parts, to_wake
from actorllm.worker.spec_decode.build import DraftMethod, build_proposer
from actorllm.worker.spec_decode.draft_model import DraftModelProposer
from actorllm.worker.spec_decode.eagle import EagleProposer
from actorllm.worker.spec_decode.propose import Proposer, propose_drafts
from actorllm.worker.spec_decode.suffix import SuffixProposer, SuffixSettings
from actorllm.worker.step_inputs import (
    InputPlan,
    PendingInputError,
    SchedulerProtocolError,
    plan_step,
)
from actorllm.worker.step_launch import BeforeForward, StepLauncher
from actorllm.worker.step_output import (
    LaunchedStep,
    PendingStep,
    TargetHidden,
    resolve,
)

if TYPE_CHECKING:
    from actorllm.distributed.comm import GlooComm
    from actorllm.distributed.pipe import StageLink

__all__ = ["KVCacheMemoryError", "ModelRunner", "ModelRunnerStateError", "PendingStep"]


class ModelRunnerStateError(RuntimeError):
    """A method was called out of order (execute before load/initialize, or while asleep)."""


class ModelRunner:
    """Runs steps of a Llama-family model over a paged KV cache. Worker thread only.

    Constructing reads config.json only; :meth:`load_model` reads the weights.
    Raises ``ModelConfigError`` / ``UnsupportedArchitectureError`` (bad checkpoint),
    ``ValueError`` (bad option, ``max_model_len`` above the model's positions).

    ``staged_inputs``: upload step inputs through pinned staging buffers on a copy stream
    (default: on CUDA only; tests turn it on for CPU to check the logic).
    ``max_graph_batch``: the largest decode batch captured as a CUDA graph.
    ``hybrid_kv_cache``: a model mixing sliding-window and full-attention layers (Gemma 2/3)
    gets one block table per KV cache group, so sliding layers hand back out-of-window
    blocks (``core/kv_cache/groups.py``); False keeps one table (every block kept).
    ``lora``: serve LoRA adapters beside the base model (``worker/lora_slots.py``); decode
    steps then run eagerly (no CUDA graphs).
    """

    def __init__(
        self,
        model_path: str | Path,
        *,
        dtype: str = "auto",
        device: str | torch.device = "cpu",
        attention_backend: str = "auto",
        load_format: LoadFormat = "auto",
        block_size: int = 16,
        kv_cache_dtype: str = "auto",
        max_num_seqs: int = 256,
        max_model_len: int | None = None,
        seed: int = 0,
        max_num_batched_tokens: int = 2048,
        enforce_eager: bool = False,
        staged_inputs: bool | None = None,
        max_graph_batch: int = 512,
        hybrid_kv_cache: bool = True,
        tp_rank: int = 0,
        tp_size: int = 1,
        pp_rank: int = 0,
        pp_size: int = 1,
        pp_partition: str | None = None,
        weights_on_huge_pages: bool = True,
        quantization: str | None = None,
        num_speculative_tokens: int = 0,
        prompt_lookup_min: int = 5,
        prompt_lookup_max: int = 5,
        draft_model: str | None = None,
        draft_method: DraftMethod = "draft_model",
        suffix: SuffixSettings | None = None,
        pooling: tuple[str, dict[str, Any] | None] | None = None,
        lora: LoRASettings | None = None,
        logits_processors: BatchProcessors | None = None,
        watermark: WatermarkConfig | None = None,
        return_sampling_mask: bool = False,
        return_routed_experts: bool = False,
    ) -> None:
        self.model_path = Path(model_path)
        self.device = torch.device(device)
        # CPU: the loaded weights' memory collapsed into huge pages (worker/huge_pages.py).
        self.weights_on_huge_pages = weights_on_huge_pages and self.device.type == "cpu"
        self.pp_size = pp_size
        self.tp_rank, self.pp_rank = tp_rank, pp_rank  # this rank's place (weight checksums)
        # This rank's shard and stage (worker/rank_config.py), max_model_len set.
        self.model_config = rank_model_config(
            self.model_path, max_model_len=max_model_len, tp_rank=tp_rank, tp_size=tp_size,
            pp_rank=pp_rank, pp_size=pp_size, pp_partition=pp_partition, pooling=pooling,
            lora=lora, speculative=num_speculative_tokens > 0,
        )  # fmt: skip
        cfg = self.model_config
        # A pooling model (--runner pooling --convert embed|classify): (convert, vLLM's
        # pooler config); its steps pool instead of sampling (worker/decoder_pooling.py).
        self.pooling = pooling
        self.pooling_head: PoolingHead | None = None
        # The layers this runner's KV cache holds (pipeline parallel: its stage's only).
        self.kv_config = stage_kv_config(self.model_config)
        self.kv_groups = kv_cache_groups(self.kv_config, hybrid_kv_cache)
        self.dtype = resolve_dtype(dtype, cfg, self.device)
        # Refused here, at start, if the checkpoint's quantization cannot run (models/quant).
        self.quant_spec = checkpoint_quantization(cfg, quantization)
        self.quantization = quantization
        self.attention_backend = resolve_backend(attention_backend, self.device)
        # The KV cache's storage (kernels/kv_quant.py): the model's dtype, bf16 or fp8.
        self.kv_dtype = cache_dtype(kv_cache_dtype, self.dtype)
        self.load_format: LoadFormat = load_format
        self.block_size = block_size
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.seed = seed
        # CUDA graphs for decode batches need CUDA and the Triton backend (capturable).
        self.enforce_eager = enforce_eager
        self.max_graph_batch = max_graph_batch
        self.model: CausalLM | None = None
        self.weight_bytes = 0  # resident bytes of the loaded weights (after load_model)
        self.kv_caches: KVCaches = []
        self.num_blocks = 0
        self.sleep_level = 0  # 0 = awake
        # Custom logits processors (worker/logitsprocs/), told of each batch change.
        self.logitsprocs = logits_processors
        self.asleep: frozenset[str] = frozenset()  # sleep tags still asleep (sleep_tags.py)
        self.input_batch = self._new_batch()
        self.sampler = Sampler(
            cfg.vocab_size,
            self.device,
            seed,
            watermark=watermark,
            return_sampling_mask=return_sampling_mask,
        )
        staged = self.device.type == "cuda" if staged_inputs is None else staged_inputs
        self.launcher = StepLauncher(
            self.device,
            # Padded graph batches may exceed the token budget at tiny budgets.
            max_num_tokens=max(max_num_batched_tokens, min(max_num_seqs, max_graph_batch)),
            max_num_seqs=max_num_seqs,
            max_blocks_per_seq=self.input_batch.max_blocks,
            staged=staged,
        )
        # Steps on the device whose sampled ids are not yet read back into the batch (at
        # most two: the pinned host buffers alternate); oldest first.
        self._on_device: deque[LaunchedStep] = deque()
        self.comm: GlooComm | None = None  # tensor parallel: the group's collectives
        self._link: StageLink | None = None  # pipeline parallel: this stage's link
        # Speculative decoding: drafts proposed after each step resolves (n-gram lookup, a
        # draft model or an EAGLE head on this thread: worker/spec_decode/build.py).
        self.proposer: Proposer | None = build_proposer(
            num_speculative_tokens, prompt_lookup_min=prompt_lookup_min,
            prompt_lookup_max=prompt_lookup_max, draft_model=draft_model,
            draft_method=draft_method, target=cfg, num_kv_groups=len(self.kv_groups),
            dtype=self.dtype, device=self.device, kv_cache_dtype=kv_cache_dtype,
            attention_backend=self.attention_backend, block_size=block_size,
            max_model_len=self.max_model_len, seed=seed, load_format=load_format,
            suffix=suffix,
        )  # fmt: skip
        if isinstance(self.proposer, EagleProposer):  # a head over our hidden states
            self.launcher.keep_hidden = True
        # LoRA adapters: the slots (built with the model) and each request's adapter.
        self.adapters = RequestAdapters(lora)
        self.return_routed_experts = return_routed_experts
        if return_routed_experts:
            check_routed_capture(cfg, num_speculative_tokens, pp_size)

    def attach_tp(self, comm: GlooComm, before_forward: BeforeForward | None) -> None:
        """Run as one rank of a tensor-parallel group (pipeline parallel: one stage of the
        pipeline): the model's collectives (its stage-to-stage sends) go through ``comm``;
        rank 0 passes ``before_forward`` (it sends each step to the others)."""
        self.comm = comm
        self.launcher.before_forward = before_forward
        if self.model is not None:
            self._bind(comm)

    def _bind(self, comm: GlooComm) -> None:
        assert self.model is not None
        self._link = bind_group(
            self.model, comm, pp_size=self.pp_size, link=self._link, launcher=self.launcher,
            hidden_size=self.model_config.hidden_size, dtype=self.dtype,
        )  # fmt: skip

    @property
    def max_model_len(self) -> int:
        return self.model_config.max_model_len

    def prompt_embeds_spec(self) -> tuple[int, torch.dtype] | None:
        """(width, dtype) of the rows an embedding prompt feeds the model (its embeddings'
        width: hidden_size but for OPT-350m's); None when the model's code does not take
        them."""
        model_cls = type(self.model) if self.model is not None else None
        if model_cls is None or not model_cls.supports_prompt_embeds:
            return None
        return int(self.model_config.embed_size), self.dtype

    # -- lifecycle -------------------------------------------------------------------

    def load_model(self) -> None:
        """Build the model and load its weights (blocks for the whole load)."""
        ops = get_ops(self.attention_backend, self.device)
        self.model, self.weight_bytes = load_runner_model(
            self.model_path, self.model_config, dtype=self.dtype, device=self.device, ops=ops,
            load_format=self.load_format, seed=self.seed, quantization=self.quantization,
            kv_dtype=self.kv_dtype, kv_groups=self.kv_groups,
            kv_num_layers=self.kv_config.num_layers, huge_pages=self.weights_on_huge_pages,
        )  # fmt: skip
        if self.comm is not None:
            self._bind(self.comm)  # reloaded (wake_up)
        if isinstance(self.proposer, DraftModelProposer):
            self.proposer.load(self.model)
        if self.pooling is not None:
            convert, overrides = self.pooling
            self.pooling_head = decoder_pooling_head(
                self.model_path, convert, overrides, self.dtype, self.device
            )
        # After CPU prepacking (in load_runner_model): the LoRA hooks wrap the final linears.
        self.adapters.attach(self.model, self.dtype, self.model_config)
        if self.return_routed_experts:
            self.launcher.recorder = attach_recorder(self.model)
        self.sampler.sample_seeded = ops.sample_seeded  # Triton: noise drawn in the kernel
        self.sampler.apply_token_bitmask = ops.apply_token_bitmask

    @property
    def kv_group_windows(self) -> tuple[int | None, ...]:
        """Each KV cache group's window (None: full attention); what the scheduler needs."""
        return tuple(g.window for g in self.kv_groups)

    def kv_cache_bytes_per_block(self) -> int:
        """``2 * group_size * block_size * num_kv_heads * head_dim * dtype_size`` (group_size
        = num_layers unless the model is hybrid)."""
        own = kv_cache_bytes_per_block(
            self.kv_config, self.block_size, self.kv_dtype, self.kv_groups
        )
        if isinstance(self.proposer, DraftModelProposer):
            own += self.proposer.bytes_per_block()  # the draft's cache shares the blocks
        return own

    def profile_num_blocks(self, gpu_memory_utilization: float) -> int:
        """CUDA only: how many KV blocks fit in ``gpu_memory_utilization`` of the GPU, from
        one :meth:`profile_run` (``memory_profile.py``). Blocks the thread for the run;
        raises :class:`ModelRunnerStateError` before :meth:`load_model` or on a non-CUDA
        device, :class:`KVCacheMemoryError` when no cache fits.
        """
        if self.device.type != "cuda":
            raise ModelRunnerStateError("profile_num_blocks() needs a CUDA device")
        return measure_num_blocks(
            self.device, self.profile_run, gpu_memory_utilization, self.kv_cache_bytes_per_block()
        )

    def profile_run(self) -> int:
        """One forward + logits over ``max_num_batched_tokens`` dummy tokens on a scratch
        cache (freed afterwards); returns the scratch cache's size in bytes."""
        model = self.model
        if model is None:
            raise ModelRunnerStateError("profile_run() before load_model()")
        n = min(self.max_num_batched_tokens, self.max_model_len)
        return dummy_forward(model, n, self.max_num_seqs, self.block_size)

    def initialize_kv_cache(self, num_blocks: int, *, capture: bool = True) -> None:
        """Allocate ``num_blocks`` blocks per layer (block 0 is the null block), then (CUDA,
        Triton backend, not ``enforce_eager``, ``capture``) capture the decode CUDA graphs
        over it."""
        self.launcher.graphs = None  # graphs hold the old cache's addresses
        self.kv_caches = allocate_kv_caches(
            self.kv_config,
            num_blocks,
            self.block_size,
            self.kv_dtype,
            self.device,
            layout=kv_layout(self.attention_backend),
            groups=self.kv_groups,
        )
        self.num_blocks = num_blocks
        if isinstance(self.proposer, DraftModelProposer):
            self.proposer.allocate(num_blocks, kv_layout(self.attention_backend))
        if capture and self.graphs_enabled:
            self._capture_graphs()

    @property
    def graphs_enabled(self) -> bool:
        """CUDA graphs for decode: CUDA device, Triton backend, not ``enforce_eager``."""
        return (
            self.device.type == "cuda"
            and len(self.kv_groups) == 1  # graphs replay one block table
            and not self.enforce_eager
            and self.attention_backend == "triton"
            and self.launcher.buffers is not None
            and self.lora is None  # graphs would freeze one step's adapter rows
            # Quantized MoE experts slice each expert's rows on the host: not capturable.
            and not (self.model is not None and quantized_experts(self.model))
        )

    def _capture_graphs(self) -> None:
        model, streams = self.model, self.launcher.streams
        if model is None or not isinstance(streams, CudaStreams):
            return
        self.launcher.graphs = capture_decode_graphs(
            model, self.kv_caches, self.device, streams.compute,
            max_num_seqs=self.max_num_seqs,
            max_batch=min(self.max_graph_batch, self.max_num_batched_tokens),
            max_blocks_per_seq=self.input_batch.max_blocks, max_seq_len=self.max_model_len,
        )  # fmt: skip

    def reset_requests(self) -> None:
        """Forget every request the worker holds (a rebuilt scheduler re-sends them as new).

        Steps still in flight are resolved first (their outputs stay readable). The KV
        cache tensors stay allocated; their contents are simply no longer referenced.
        """
        self._resolve_all()
        self.input_batch = self._new_batch()
        if isinstance(self.proposer, (DraftModelProposer, SuffixProposer)):
            self.proposer.reset()
        if self.pooling_head is not None:
            self.pooling_head.reset()
        self.adapters.clear()

    def release(self) -> None:
        """The engine closed: drop the KV cache and the weights now.

        The closed engine's objects reference each other, so without this they (the whole
        KV cache: 2 GiB in the benchmark presets) stay allocated until the host's next full
        GC collection, and an application that opens a second engine holds both. Steps in
        flight are resolved first; the runner serves nothing afterwards."""
        self._drop_kv_cache()
        self.model = None
        if isinstance(self.proposer, DraftModelProposer):
            self.proposer.model = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def sleep(self, level: int = 1, tags: Sequence[str] | None = None) -> None:
        """Free memory while idle. Worker-side request state is dropped.

        Level 1: KV cache freed; weights moved to host memory (on CPU they already are, and
        stay). Level 2: KV cache and weights freed; :meth:`wake_up` reloads from disk.
        ``tags=["kv_cache"]``: the KV cache alone, the weights untouched (vLLM's
        ``release_kv_cache_memory``; ``wake_up(["kv_cache"])`` brings it back).
        CUDA graphs are dropped (they point at the freed memory) and recaptured on wake-up.
        """
        if level not in (1, 2):
            raise ValueError(f"sleep level must be 1 or 2, got {level}")
        if self.sleep_level:
            raise ModelRunnerStateError(f"already asleep (level {self.sleep_level})")
        asleep = sleep_parts(tags)
        self._drop_kv_cache()
        if WEIGHTS in asleep:
            if level == 2:
                self.model = None
            elif self.model is not None:
                weights_to_host(self.model, self.device)
        self.sleep_level = level
        self.asleep = asleep
        free_device_memory(self.device)

    def _drop_kv_cache(self) -> None:
        """Steps in flight resolved, then the KV cache, the CUDA graphs over it and the
        requests' batch state dropped (sleep, release)."""
        self._resolve_all()
        self.launcher.graphs = None
        self.kv_caches = []
        self.input_batch = self._new_batch()
        if isinstance(self.proposer, DraftModelProposer):
            self.proposer.release()
        elif isinstance(self.proposer, SuffixProposer):  # past outputs stay: they are host data
            self.proposer.reset()
        self.adapters.clear()

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """Restore what ``tags`` names (worker/sleep_tags.py; None: everything): the weights
        (reloaded at level 2), the KV cache (re-allocated, its contents lost). Steps are
        refused until both are back."""
        if not self.sleep_level:
            return
        wake = to_wake(self.asleep, tags)
        if WEIGHTS in wake:
            if self.sleep_level == 2:
                self.load_model()
            elif self.model is not None:
                weights_to_device(self.model, self.device)
            self.asleep -= {WEIGHTS}
            if KV_CACHE not in self.asleep and self.graphs_enabled:
                self._capture_graphs()  # the cache came back first: capture over it now
        if KV_CACHE in wake:
            self.asleep -= {KV_CACHE}
            if self.num_blocks:
                # CUDA graphs need the weights on the device: captured when they come back.
                self.initialize_kv_cache(self.num_blocks, capture=WEIGHTS not in self.asleep)
        if not self.asleep:
            self.sleep_level = 0

    def statistics(self) -> dict[str, object]:
        return {
            "inflight_steps": len(self._on_device),
            "batch": self.input_batch.statistics(),
            **self.launcher.statistics(),
            **self.adapters.statistics(),
        }

    # -- LoRA adapters (between steps) ---------------------------------------------------

    def add_lora(self, request: LoRARequest) -> bool:
        """Read and check an adapter into the host cache (raises ``LoRAAdapterError``, a
        ``ValueError`` naming it); False if it was already loaded."""
        return self._lora_slots().add(request)

    def remove_lora(self, name: str) -> bool:
        """Forget adapter ``name``; False if it was not loaded."""
        return self._lora_slots().remove(name)

    def pin_lora(self, name: str) -> bool:
        """Keep adapter ``name`` resident (``LoRASlots.pin``; ``ValueError`` naming why
        not)."""
        return self._lora_slots().pin(name)

    def list_loras(self) -> list[str]:
        return self.adapters.names()

    def _lora_slots(self) -> LoRASlots:
        slots = self.adapters.enabled()
        self._resolve_all()  # an adapter's slot may change under the steps in flight
        return slots

    @property
    def lora(self) -> LoRASlots | None:
        """The adapter slots (``worker/lora_slots.py``); None without LoRA or a model."""
        return self.adapters.slots

    @property
    def lora_settings(self) -> LoRASettings | None:
        return self.adapters.settings

    # -- the step --------------------------------------------------------------------

    def execute(self, so: SchedulerOutput) -> ModelRunnerOutput:
        """Run one step: update the batch, forward, sample. Blocks until tokens are on the host.

        Raises :class:`ModelRunnerStateError` before load/initialize or while asleep, and
        ``SchedulerProtocolError`` if ``so`` contradicts what the worker holds.
        """
        return self.launch(so).result()

    def launch(self, so: SchedulerOutput) -> PendingStep:
        """Enqueue one step and return without waiting for its tokens.

        Input tokens that are placeholders in ``so`` (sampled by a step launched earlier and
        not yet resolved) are gathered on the device. At most two steps are in flight: a
        third launch first resolves the oldest. Raises like :meth:`execute`.
        """
        t0 = time.perf_counter()
        model = self._ready_model()
        # The pinned sampled-id buffers are double-buffered; a speculative runner resolves
        # every step first (drafts come from the tokens the last step accepted).
        # Pipeline parallel: a step per stage (each stage works on one of them).
        limit = 1 if self.proposer is not None else max(2, self.pp_size)
        while len(self._on_device) >= limit:
            self._resolve(self._on_device.popleft())
        self._update_states(so)
        for req_id, drafts in so.scheduled_spec_decode_tokens.items():
            self.input_batch.write_drafts(self.input_batch.req_id_to_index[req_id], drafts)
        if so.is_empty:
            if self.logitsprocs is not None:
                self.logitsprocs.flush(self.input_batch)
            out = ModelRunnerOutput(step_id=so.step_id, req_ids=[], sampled_token_ids=[])
            done = LaunchedStep(
                step_id=so.step_id, req_ids=[], sample_rows=[], sample_gens=[], sampled=None,
                num_logprobs=[], logprobs=None, prompt_logprobs={}, t0=t0, output=out,
            )  # fmt: skip
            return PendingStep(done, self._resolve_through)
        plan = self._plan(so)
        if self.logitsprocs is not None:  # the step's batch changes, before its forward
            self.logitsprocs.flush(self.input_batch)
        if self.pooling_head is not None:  # pools at once: nothing stays on the device
            out = run_pooling_step(
                model, self.kv_caches, self.input_batch, self.pooling_head, plan, so.step_id,
                self.device,
            )  # fmt: skip
            done = LaunchedStep(
                step_id=so.step_id, req_ids=out.req_ids, sample_rows=[], sample_gens=[],
                sampled=None, num_logprobs=[], logprobs=None, prompt_logprobs={}, t0=t0,
                output=out,
            )  # fmt: skip
            return PendingStep(done, self._resolve_through)
        self.adapters.prepare(plan.req_ids, plan.num_scheduled, self.device)
        step = self.launcher.launch(
            model, self.kv_caches, self.input_batch, self.sampler, plan, so.step_id,
            grammar=so.grammar_bitmask, drafts=so.scheduled_spec_decode_tokens or None,
        )  # fmt: skip
        step.t0 = t0
        self._on_device.append(step)
        return PendingStep(step, self._resolve_through)

    def _resolve_through(self, step: LaunchedStep) -> ModelRunnerOutput:
        """Resolve in launch order up to and including ``step``."""
        while step.output is None and self._on_device:
            self._resolve(self._on_device.popleft())
        return self._resolve(step)

    def _resolve_all(self) -> None:
        while self._on_device:
            self._resolve(self._on_device.popleft())

    def _resolve(self, step: LaunchedStep) -> ModelRunnerOutput:
        return resolve(step, self.input_batch, self._propose if self.proposer else None)

    def _propose(
        self, batch: InputBatch, slots: list[int], hidden: TargetHidden | None
    ) -> dict[str, list[int]]:
        assert self.proposer is not None
        return propose_drafts(self.proposer, batch, slots, hidden)

    def _plan(self, so: SchedulerOutput) -> InputPlan:
        """Plan on the host; falls back to resolving in-flight steps (a host wait) when the
        step needs their tokens on the host: penalties / bad_words history, or an input
        token older than the latest sampled one."""
        batch = self.input_batch
        if self._on_device:
            slots = np.array([batch.req_id_to_index[r] for r in so.num_scheduled_tokens
                              if r in batch.req_id_to_index], dtype=np.int64)  # fmt: skip
            pending = len(slots) and batch.num_pending[slots].any()
            # Pipeline parallel: a step in flight records its tokens only when it resolves.
            if pending and (self.pp_size > 1 or needs_token_history(batch, slots)):
                self._resolve_all()
        spec = so.scheduled_spec_decode_tokens or None
        try:
            return plan_step(batch, so.num_scheduled_tokens, spec)
        except PendingInputError:
            self._resolve_all()
            return plan_step(batch, so.num_scheduled_tokens, spec)

    def _ready_model(self) -> CausalLM:
        if self.sleep_level:
            raise ModelRunnerStateError("execute() while asleep: call wake_up() first")
        if self.model is None:
            raise ModelRunnerStateError("execute() before load_model()")
        if not self.kv_caches:
            raise ModelRunnerStateError("execute() before initialize_kv_cache()")
        return self.model

    def _update_states(self, so: SchedulerOutput) -> None:
        batch = self.input_batch
        for req_id in (*so.finished_req_ids, *so.preempted_req_ids):
            batch.remove_request(req_id)
            if isinstance(self.proposer, SuffixProposer):  # its trie over the tokens goes
                self.proposer.forget(req_id)
            if self.pooling_head is not None:
                self.pooling_head.forget(req_id)
            self.adapters.forget(req_id)
        for new in so.scheduled_new_reqs:
            batch.add_request(new)
            self.adapters.track(new.req_id, new.lora_request)
        cached = so.scheduled_cached_reqs
        index = batch.req_id_to_index
        unknown = next((c.req_id for c in cached if c.req_id not in index), None)
        if unknown is not None:
            raise SchedulerProtocolError(f"cached request {unknown} is unknown to the worker")
        batch.update_cached_many(cached)
        batch.condense()

    def _new_batch(self) -> InputBatch:
        batch = InputBatch(
            self.max_num_seqs, self.max_model_len, self.block_size, len(self.kv_groups)
        )
        if self.logitsprocs is not None:
            self.logitsprocs.reset()
            batch.logitsprocs = self.logitsprocs
        return batch


def _conforms(runner: ModelRunner) -> Runner:
    return runner  # mypy: ModelRunner satisfies the Runner protocol
