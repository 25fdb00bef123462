"""``ModelRunner``: the one object the executor actor drives, from its worker thread.

It owns the model, the paged KV cache tensors, the persistent :class:`InputBatch` and the
:class:`Sampler`. Every method blocks the calling thread (model loading, a forward pass) and
touches no event loop, so it must be called from the executor's dedicated thread only.

    runner = ModelRunner(path, dtype="float32", max_model_len=2048)
    runner.load_model()
    runner.initialize_kv_cache(num_blocks=512)   # block 0 is the null block
    out = runner.execute(scheduler_output)       # -> ModelRunnerOutput
"""

from __future__ import annotations

import gc
import time
from pathlib import Path

import msgspec
import numpy as np
import torch

from actorllm.core.model_runner_output import ModelRunnerOutput, TokenLogprobs
from actorllm.core.scheduler_output import SchedulerOutput
from actorllm.kernels.ops import get_ops, resolve_backend
from actorllm.models.attention import AttentionMetadata
from actorllm.models.config import ModelConfig
from actorllm.models.llama import LlamaForCausalLM
from actorllm.models.loader import LoadFormat, load_model, resolve_dtype
from actorllm.worker.input_batch import InputBatch
from actorllm.worker.kv_cache import KVCaches, allocate_kv_caches, kv_cache_bytes_per_block
from actorllm.worker.sampler import Sampler, compute_logprobs
from actorllm.worker.sampling_metadata import build_sampling_metadata
from actorllm.worker.step_inputs import (
    PromptLogprobsPlan,
    SchedulerProtocolError,
    StepInputs,
    prepare_step_inputs,
)


class ModelRunnerStateError(RuntimeError):
    """A method was called out of order (execute before load/initialize, or while asleep)."""


class ModelRunner:
    """Runs steps of a Llama-family model over a paged KV cache. Worker thread only.

    Constructing reads config.json only; :meth:`load_model` reads the weights.
    Raises ``ModelConfigError`` / ``UnsupportedArchitectureError`` (bad checkpoint),
    ``ValueError`` (bad option, ``max_model_len`` above the model's positions).
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
        max_num_seqs: int = 256,
        max_model_len: int | None = None,
        seed: int = 0,
        max_num_batched_tokens: int = 2048,
        enforce_eager: bool = False,
    ) -> None:
        self.model_path = Path(model_path)
        self.device = torch.device(device)
        cfg = ModelConfig.from_pretrained(self.model_path)
        limit = cfg.max_position_embeddings
        if max_model_len is not None and not 0 < max_model_len <= limit:
            raise ValueError(
                f"max_model_len must be in [1, {limit}] for this model, got {max_model_len}"
            )
        self.model_config = msgspec.structs.replace(cfg, max_model_len=max_model_len or limit)
        self.dtype = resolve_dtype(dtype, cfg)
        self.attention_backend = resolve_backend(attention_backend, self.device)
        self.load_format: LoadFormat = load_format
        self.block_size = block_size
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.seed = seed
        # No CUDA graphs on this reference path yet: every step runs eagerly either way.
        self.enforce_eager = enforce_eager
        self.model: LlamaForCausalLM | None = None
        self.kv_caches: KVCaches = []
        self.num_blocks = 0
        self.sleep_level = 0  # 0 = awake
        self.input_batch = self._new_batch()
        self.sampler = Sampler(cfg.vocab_size, self.device, seed)

    @property
    def max_model_len(self) -> int:
        return self.model_config.max_model_len

    # -- lifecycle -------------------------------------------------------------------

    def load_model(self) -> None:
        """Build the model and load its weights (blocks for the whole load)."""
        self.model = load_model(
            self.model_path,
            self.model_config,
            dtype=self.dtype,
            device=self.device,
            ops=get_ops(self.attention_backend, self.device),
            load_format=self.load_format,
            seed=self.seed,
            max_positions=self.max_model_len,
        )

    def kv_cache_bytes_per_block(self) -> int:
        """``2 * num_layers * block_size * num_kv_heads * head_dim * dtype_size``."""
        return kv_cache_bytes_per_block(self.model_config, self.block_size, self.dtype)

    def profile_num_blocks(self, gpu_memory_utilization: float) -> int:
        """CUDA only: how many KV blocks fit in ``gpu_memory_utilization`` of the GPU.

        Runs one forward over ``max_num_batched_tokens`` dummy tokens to measure the peak
        activation memory, then gives the rest of the budget (after weights and that peak)
        to the cache. Blocks the thread for the profile run; raises
        :class:`ModelRunnerStateError` before :meth:`load_model` or on a non-CUDA device.
        """
        if self.device.type != "cuda":
            raise ModelRunnerStateError("profile_num_blocks() needs a CUDA device")
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        scratch = self.profile_run()
        torch.cuda.synchronize(self.device)  # deliberate: the peak is only known after the run
        peak = torch.cuda.max_memory_allocated(self.device) - scratch
        _, total = torch.cuda.mem_get_info(self.device)
        budget = int(total * gpu_memory_utilization) - peak
        return max(2, budget // self.kv_cache_bytes_per_block())

    def profile_run(self) -> int:
        """One forward + logits over ``max_num_batched_tokens`` dummy tokens on a scratch
        cache (freed afterwards); returns the scratch cache's size in bytes."""
        model = self.model
        if model is None:
            raise ModelRunnerStateError("profile_run() before load_model()")
        n = max(1, min(self.max_num_batched_tokens, self.max_model_len))
        blocks = -(-n // self.block_size)
        caches = allocate_kv_caches(
            self.model_config, blocks + 1, self.block_size, self.dtype, self.device
        )
        pos = torch.arange(n, device=self.device)
        meta = AttentionMetadata(
            query_start_loc=torch.tensor([0, n], dtype=torch.int32, device=self.device),
            seq_lens=torch.tensor([n], dtype=torch.int32, device=self.device),
            block_table=torch.arange(1, blocks + 1, dtype=torch.int32, device=self.device)[None],
            slot_mapping=pos + self.block_size,
            query_start_loc_cpu=[0, n],
            seq_lens_cpu=[n],
            max_query_len=n,
            max_seq_len=n,
        )
        with torch.inference_mode():
            hidden = model(pos % self.model_config.vocab_size, pos, meta, caches)  # [n, H]
            model.compute_logits(hidden[-min(n, self.max_num_seqs) :])  # sampled rows
        return (blocks + 1) * self.kv_cache_bytes_per_block()

    def initialize_kv_cache(self, num_blocks: int) -> None:
        """Allocate ``num_blocks`` blocks per layer (block 0 is the null block)."""
        self.kv_caches = allocate_kv_caches(
            self.model_config, num_blocks, self.block_size, self.dtype, self.device
        )
        self.num_blocks = num_blocks

    def reset_requests(self) -> None:
        """Forget every request the worker holds (a rebuilt scheduler re-sends them as new).

        The KV cache tensors stay allocated; their contents are simply no longer referenced.
        """
        self.input_batch = self._new_batch()

    def sleep(self, level: int = 1) -> None:
        """Free memory while idle. Worker-side request state is dropped.

        Level 1: KV cache freed; weights moved to host memory (on CPU they already are, and
        stay). Level 2: KV cache and weights freed; :meth:`wake_up` reloads from disk.
        """
        if level not in (1, 2):
            raise ValueError(f"sleep level must be 1 or 2, got {level}")
        if self.sleep_level:
            raise ModelRunnerStateError(f"already asleep (level {self.sleep_level})")
        self.kv_caches = []
        self.input_batch = self._new_batch()
        if level == 2:
            self.model = None
        elif self.model is not None and self.device.type != "cpu":
            for p in self.model.parameters():
                p.data = p.data.to("cpu").pin_memory()
        self.sleep_level = level
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def wake_up(self) -> None:
        """Restore the weights and re-allocate the KV cache (its contents are lost)."""
        if not self.sleep_level:
            return
        if self.sleep_level == 2:
            self.load_model()
        elif self.model is not None and self.device.type != "cpu":
            for p in self.model.parameters():
                p.data = p.data.to(self.device)
        if self.num_blocks:
            self.initialize_kv_cache(self.num_blocks)
        self.sleep_level = 0

    # -- the step --------------------------------------------------------------------

    def execute(self, so: SchedulerOutput) -> ModelRunnerOutput:
        """Run one step: update the batch, forward, sample. Blocks until tokens are on the host.

        Raises :class:`ModelRunnerStateError` before load/initialize or while asleep, and
        ``SchedulerProtocolError`` if ``so`` contradicts what the worker holds.
        """
        t0 = time.perf_counter()
        model = self._ready_model()
        self._update_states(so)
        if so.is_empty:
            return ModelRunnerOutput(step_id=so.step_id, req_ids=[], sampled_token_ids=[])
        step = prepare_step_inputs(self.input_batch, so.num_scheduled_tokens, self.device)
        with torch.inference_mode():
            hidden = model(
                step.input_ids, step.positions, step.attn_metadata, self.kv_caches
            )  # [T, H]
            sampled, logprobs = self._sample(model, hidden, step)
            prompt_lps = {
                p.req_id: self._prompt_logprobs(model, hidden, p) for p in step.prompt_logprobs
            }
        self.input_batch.num_computed_tokens[step.slots] += _scheduled_counts(step)
        return ModelRunnerOutput(
            step_id=so.step_id,
            req_ids=step.req_ids,
            sampled_token_ids=sampled,
            logprobs=logprobs,
            prompt_logprobs=prompt_lps,
            execute_time_s=time.perf_counter() - t0,
        )

    def _ready_model(self) -> LlamaForCausalLM:
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
        for new in so.scheduled_new_reqs:
            batch.add_request(new)
        for cached in so.scheduled_cached_reqs:
            if cached.req_id not in batch.req_id_to_index:
                raise SchedulerProtocolError(
                    f"cached request {cached.req_id} is unknown to the worker"
                )
            batch.update_cached(cached)
        batch.condense()

    def _sample(
        self, model: LlamaForCausalLM, hidden: torch.Tensor, step: StepInputs
    ) -> tuple[list[list[int]], dict[str, TokenLogprobs]]:
        batch = self.input_batch
        sample_slots = step.slots[step.sample_mask]
        sampled: list[list[int]] = [[] for _ in step.req_ids]
        if len(sample_slots) == 0:
            return sampled, {}
        logits = model.compute_logits(hidden.index_select(0, step.sample_hidden_rows))  # [N, V]
        meta = build_sampling_metadata(
            batch, sample_slots, self.model_config.vocab_size, self.device
        )
        out = self.sampler(logits, meta)
        tokens = out.sampled_token_ids.tolist()  # deliberate sync: tokens go back to the host
        logprobs: dict[str, TokenLogprobs] = {}
        lp = out.logprobs
        lp_host = None
        if lp is not None:  # one host copy for all rows
            lp_host = (lp.token_ids.tolist(), lp.logprobs.tolist(), lp.ranks.tolist())
        rows = np.flatnonzero(step.sample_mask).tolist()
        for i, (b, slot) in enumerate(zip(rows, sample_slots.tolist(), strict=True)):
            batch.append_token(slot, tokens[i])
            sampled[b] = [tokens[i]]
            k = meta.num_logprobs[i]
            if k is not None and lp_host is not None:
                ids, lps, ranks = lp_host
                logprobs[step.req_ids[b]] = TokenLogprobs(
                    token_ids=ids[i][: k + 1], logprobs=lps[i][: k + 1], rank=ranks[i]
                )
        return sampled, logprobs

    def _prompt_logprobs(
        self, model: LlamaForCausalLM, hidden: torch.Tensor, plan: PromptLogprobsPlan
    ) -> list[TokenLogprobs]:
        if len(plan.hidden_rows) == 0:
            return []
        rows = torch.from_numpy(plan.hidden_rows).to(self.device)
        logprobs = model.compute_logits(hidden.index_select(0, rows)).log_softmax(dim=-1)  # [M, V]
        targets = torch.from_numpy(np.ascontiguousarray(plan.target_token_ids)).to(self.device)
        t = compute_logprobs(logprobs, targets, plan.k)
        ids, lps, ranks = t.token_ids.tolist(), t.logprobs.tolist(), t.ranks.tolist()  # host sync
        return [
            TokenLogprobs(token_ids=i, logprobs=lp, rank=r)
            for i, lp, r in zip(ids, lps, ranks, strict=True)
        ]

    def _new_batch(self) -> InputBatch:
        return InputBatch(self.max_num_seqs, self.max_model_len, self.block_size)


def _scheduled_counts(step: StepInputs) -> np.ndarray:
    qsl = np.asarray(step.attn_metadata.query_start_loc_cpu)
    return np.diff(qsl)
