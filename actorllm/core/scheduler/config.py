"""Scheduler configuration, validated when built."""

from __future__ import annotations

from typing import Literal

import msgspec

from actorllm.core.kv_cache.block_hash import HashAlgo
from actorllm.core.kv_cache.sizing import blocks_for_one_request, largest_model_len

Policy = Literal["fcfs", "priority"]


class SchedulerConfig(msgspec.Struct, frozen=True, kw_only=True):
    """What the scheduler may do per step, and the shape of the KV cache it manages.

    Raises ``ValueError`` for inconsistent settings. Two checks guarantee progress rather
    than style: the pool must hold one request of ``max_model_len`` tokens (else a lone
    request could preempt itself forever), and without chunked prefill one step's token
    budget must hold a whole ``max_model_len`` prompt (else it would wait forever).

    >>> SchedulerConfig(max_model_len=64, num_blocks=4, block_size=16)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: num_blocks=4 (3 usable) x block_size=16 cannot hold max_model_len=64 tokens; ...
    """

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    max_model_len: int = 2048
    block_size: int = 16
    num_blocks: int = 1024  # including the null block
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0  # 0 = off; else the largest chunk per request
    # vLLM's long_prefill_token_threshold_adaptive: the cap never goes below a fair share of
    # the budget, max_num_batched_tokens / (requests running and waiting).
    long_prefill_token_threshold_adaptive: bool = False
    policy: Policy = "fcfs"
    async_scheduling: bool = False
    # Pipeline parallel: up to this many steps in flight, each of different requests (a
    # request whose token is still in the pipeline waits; vLLM's max_concurrent_batches).
    pipeline_parallel_size: int = 1
    prefix_caching_hash_algo: HashAlgo = "xxh3_128"
    # The window every attention layer shares (Mistral), or None (full attention anywhere):
    # blocks behind every running request's window go back to the pool.
    sliding_window: int | None = None
    # A hybrid model's KV cache groups (core/kv_cache/groups.py): each group's window (None:
    # full attention), one block table per group. None: one group, ``sliding_window``.
    kv_group_windows: tuple[int | None, ...] | None = None
    # Speculative decoding with a draft model: KV slots past each step's tokens where the
    # draft writes its proposals (num_speculative_tokens; 0 otherwise).
    num_lookahead_tokens: int = 0
    # LoRA: the most distinct adapters in one step (vLLM's max_loras); 0: LoRA is off and
    # requests naming an adapter are refused.
    max_loras: int = 0
    # vLLM's watermark: the fraction of the KV blocks a waiting (or preempted) request must
    # leave free to start while others run, headroom for the running ones' growth (0: off).
    watermark: float = 0.0
    # vLLM's scheduler_reserve_full_isl: a prompt prefilled in chunks starts only if the
    # pool holds all of it at once (else only its first chunk is checked).
    reserve_full_isl: bool = True
    # vLLM's enable_return_routed_experts: each request keeps the experts its positions
    # were routed to (core/routed_experts.py) and reads no prefix-cache hit, so that every
    # position is computed and recorded (vLLM keeps the routing with its cached blocks;
    # recomputing gives the same ids).
    return_routed_experts: bool = False

    def chunk_cap(self, num_requests: int) -> int:
        """One step's cap on a request's tokens (0: none) with ``num_requests`` running and
        waiting: the long-prefill threshold (with chunked prefill), floored at the fair
        share of the budget when adaptive.

        >>> SchedulerConfig(long_prefill_token_threshold=64).chunk_cap(4)
        64
        >>> c = SchedulerConfig(
        ...     long_prefill_token_threshold=64, long_prefill_token_threshold_adaptive=True
        ... )
        >>> c.chunk_cap(4), c.chunk_cap(64)  # 2048 // 4, and 2048 // 64 is under 64
        (512, 64)
        """
        cap = self.long_prefill_token_threshold if self.enable_chunked_prefill else 0
        if cap and self.long_prefill_token_threshold_adaptive and num_requests:
            cap = max(cap, self.max_num_batched_tokens // num_requests)
        return cap

    @property
    def watermark_blocks(self) -> int:
        """The blocks :attr:`watermark` keeps free (vLLM: ``int(watermark * num_blocks)``)."""
        return int(self.watermark * self.num_blocks)

    @property
    def group_windows(self) -> tuple[int | None, ...]:
        """The window of each KV cache group (one group unless the model is hybrid)."""
        if self.kv_group_windows is not None:
            return self.kv_group_windows
        return (self.sliding_window,)

    @property
    def blocks_for_one_request(self) -> int:
        """The most blocks one request can hold at once (:func:`blocks_for_one_request`)."""
        return blocks_for_one_request(
            self.max_model_len, self.block_size, self.max_num_batched_tokens, self.group_windows
        )

    def _largest_model_len(self) -> int:
        return largest_model_len(
            self.num_blocks - 1, self.block_size, self.max_num_batched_tokens, self.group_windows
        )

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "block_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}.")
        if self.num_blocks < 2:
            raise ValueError(f"num_blocks must be at least 2, got {self.num_blocks}.")
        if self.sliding_window is not None and self.sliding_window < 1:
            raise ValueError(f"sliding_window must be at least 1, got {self.sliding_window}.")
        if self.kv_group_windows is not None:
            if self.sliding_window is not None:
                raise ValueError("set sliding_window or kv_group_windows, not both.")
            if not self.kv_group_windows or any(
                w is not None and w < 1 for w in self.kv_group_windows
            ):
                raise ValueError(
                    f"kv_group_windows needs one or more groups, each window at least 1; "
                    f"got {self.kv_group_windows}."
                )
        if self.max_loras < 0:
            raise ValueError(f"max_loras must be non-negative, got {self.max_loras}.")
        if self.long_prefill_token_threshold < 0:
            raise ValueError("long_prefill_token_threshold must be non-negative.")
        if not 0.0 <= self.watermark < 1.0:
            raise ValueError(f"watermark must be in [0, 1), got {self.watermark}.")
        if self.policy not in ("fcfs", "priority"):
            raise ValueError(f"policy must be 'fcfs' or 'priority', got {self.policy!r}.")
        if self.num_blocks - 1 < self.blocks_for_one_request:
            raise ValueError(
                f"num_blocks={self.num_blocks} ({self.num_blocks - 1} usable) x "
                f"block_size={self.block_size} cannot hold "
                f"max_model_len={self.max_model_len} tokens"
                + (
                    f" with KV cache group windows {self.group_windows} "
                    f"(needs {self.blocks_for_one_request} blocks)"
                    if self.group_windows != (None,)
                    else ""
                )
                + "; the largest max_model_len these blocks hold is "
                + f"{self._largest_model_len()}."
            )
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                f"without chunked prefill, max_num_batched_tokens ({self.max_num_batched_tokens}) "
                f"must be at least max_model_len ({self.max_model_len})."
            )
