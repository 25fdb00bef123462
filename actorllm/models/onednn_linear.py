"""CPU linears through oneDNN with weights prepacked at load time.

Why: torch's CPU wheels send float32 ``F.linear`` to MKL's sgemm, which on non-Intel CPUs
(MKL dispatches on the vendor string) runs far below the ISA's speed: on a 2-core AMD EPYC
with AVX-512, oneDNN's prepacked fp32 matmul is 2.5x faster at the 75M Qwen3 shapes
(128 rows: 175 -> 69 ms over qkv + o + gate_up + down + lm_head, interleaved; results
within 6e-6 of MKL's). bfloat16 ``F.linear`` already reaches oneDNN, but unpacked: the
weight is reordered into oneDNN's blocked layout on every call. The prepack is what
inductor's freezing pass does (``mkldnn._reorder_linear_weight`` +
``mkldnn._linear_pointwise``), without compiling anything.

How: :func:`prepack_linears` turns each CPU :class:`nn.Linear` of the model into a
:class:`OneDNNLinear` (same parameters, state dict and ``isinstance``; the loaders and the
tensor-parallel slicing keep seeing plain ``weight`` / ``bias``) holding a packed copy
of the weight. The copy follows the weight: any in-place write (a reload, a weight
update) bumps the weight's version counter and the next forward repacks. The packed
layout is chosen for a batch-size hint; other row counts run on it too (same results,
measured at 7, 128, 512 and 2048 rows).

Where it applies is detected, never assumed: oneDNN built into torch, the ops present,
float32 always, bfloat16 natively where the CPU has native bf16 dot products
(``kernels/cpu_features.native_bf16``). On a CPU without them (AVX2 hosts: Zen 2/3, most
client x86) a bfloat16 GEMM is emulated, ~5x slower than float32 (2-core Zen 3, [128 x 768]
x [768 x 4096]: 9.6 ms float32, 44.7 ms bfloat16 through ``F.linear``; the 75M preset's
bf16 decode step spent 1043 of its 1097 ms in the linears), so a bfloat16 linear there is
**widened**: its weight packed as float32, the bfloat16 input widened (exact), the product
summed in float32 and rounded to bfloat16 once, at the output: the arithmetic of a bfloat16
GEMM (exact products, float32 accumulation, one rounding), only in another summation
order. A step of few rows (up to ``kernels/bf16_linear.MAX_ROWS``: decode, speculative
verification) skips the widened copy: the native kernel reads the bfloat16 weight itself,
half the bytes, with the same arithmetic. Elsewhere the model keeps ``F.linear``. Costs
memory: the packed copies sit beside the original weights (tied embeddings keep their
table for the lookup; a widened copy is twice the bfloat16 weight), so nothing is packed
where the copies would take over half of the memory available at load (a widened bf16
linear then still decodes on the native kernel, needing no copy).

Few rows (a decode step's) get a native kernel of their own where the CPU has one
(:func:`few_rows_kernel`): on an AMX host a bfloat16 weight also gets a copy packed for the
AMX kernel (``kernels/amx_linear.py``), which a decode step (up to :func:`amx_max_rows`
rows) reads at the memory's bandwidth where oneDNN's small-M matmul reads at half of it; on
a CPU with AVX512-BF16 but no AMX (Zen 4) one packed for the dot-product kernel
(``kernels/bf16_dot_linear.py``, up to :data:`DOT_MAX_ROWS` rows), which streams it ahead
of its products where oneDNN waits for it. Larger steps (prefill) keep oneDNN, faster
there. Where both copies would not fit, the few-rows one alone serves every row count.
"""

from __future__ import annotations

import functools
import logging
import os
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import nn

from actorllm.kernels import amx_linear, bf16_dot_linear, bf16_linear
from actorllm.kernels.cpu_features import native_bf16
from actorllm.kernels.row_bucket import row_bucket

logger = logging.getLogger(__name__)
# The packed copies sit beside the weights: skip packing where they would take more than
# this share of the memory free at load (a big fp32 model on a small host).
MAX_FREE_MEMORY_SHARE = 0.5
# Rows a decode step of the default batch runs: the layout oneDNN picks for this M.
BATCH_HINT = 128
# Up to this many rows a bf16 linear on an AMX host takes the AMX copy, whatever its shape
# (2-core Xeon, Qwen3-0.6B's four linears, 28 layers' weights so they come from memory:
# M = 16 35.8 vs 44.8 ms on oneDNN, M = 32 45.8 vs 50.8; its LM head M = 32 15.3 vs 16.5).
AMX_MAX_ROWS = 32
# How far the AMX copy beats oneDNN's prepacked matmul past 32 rows, timed per weight shape
# (2-core Xeon AMX VM, weights cold: 28 layers of the Qwen3-0.6B shape, 16 of
# Llama-3.2-1B, 8 of the 75M; AMX vs oneDNN ms). Weights of 1,024 inputs and more: to 96
# rows at every width (0.6B gate_up [6144 x 1024] M = 96 25.9 vs 29.9, its LM head
# [151936 x 1024] 22.7 vs 23.0, 1B gate_up [16384 x 2048] 70.2 vs 73.3; at 128 oneDNN
# catches up: 30.0 vs 31.7, 28.2 vs 21.6, 81.8 vs 80.7), to 128 where they are narrow
# (0.6B down_proj [1024 x 3072] 13.6 vs 17.9, 1B down_proj [2048 x 8192] 54.4 vs 57.0).
# Shorter rows stay on the AMX copy only while narrow (75M down_proj [768 x 2048] at 128
# 1.7 vs 2.4; its gate_up [4096 x 768] 2.8 vs 2.7 at 64, 3.2 vs 3.0 at 96; its LM head
# [32000 x 768] 3.1 vs 2.7 at 48): oneDNN computes short rows faster.
AMX_LONG_INPUT = 1024
# ((most output columns, rows) narrowest first, rows for any wider weight)
AMX_LONG_ROWS = (((2048, 128),), 96)
AMX_SHORT_ROWS = (((2048, 128), (4096, 64)), AMX_MAX_ROWS)


def amx_max_rows(out_features: int, in_features: int) -> int:
    """How many rows a bf16 [out_features x in_features] linear takes on its AMX copy (more
    go to oneDNN's, where it has one)."""
    narrow, wider = AMX_LONG_ROWS if in_features >= AMX_LONG_INPUT else AMX_SHORT_ROWS
    return next((rows for columns, rows in narrow if out_features <= columns), wider)


# Up to this many rows a bf16 linear on a CPU with AVX512-BF16 and no AMX takes the
# dot-product kernel's copy. 2-core Zen 4 VM, weights cold (28 copies of each of
# Qwen3-0.6B's, 16 of Llama-3.2-1B's), oneDNN vs the kernel, ms: 0.6B gate_up M = 1 13.7 vs
# 7.9, M = 8 14.8 vs 9.3, M = 32 32.2 vs 27.4; its o_proj M = 32 11.0 vs 10.4, M = 48 15.1
# vs 14.6; 1B's LM head [128256 x 2048] M = 32 51.8 vs 41.5, its gate_up M = 32 88.1 vs
# 84.6, its down M = 32 49.1 vs 43.9. Past 32 rows the margin thins (o_proj 1.03x at 48)
# and oneDNN's blocking over many rows takes over.
DOT_MAX_ROWS = 32


@functools.cache  # a forward asks twice a call; the host's answer does not change
def few_rows_kernel() -> ModuleType | None:
    """The native kernel that keeps its own copy of a bf16 weight for few rows here: AMX
    tiles (``kernels/amx_linear.py``), else AVX512-BF16 dot products
    (``kernels/bf16_dot_linear.py``); None: neither (oneDNN for every row count). Both
    offer ``takes`` / ``pack`` / ``linear``."""
    if amx_linear.available():
        return amx_linear
    if bf16_dot_linear.available():
        return bf16_dot_linear
    return None


def few_rows_max(out_features: int, in_features: int) -> int:
    """How many rows a bf16 [out_features x in_features] linear takes on its few-rows copy."""
    if few_rows_kernel() is amx_linear:
        return amx_max_rows(out_features, in_features)
    return DOT_MAX_ROWS


def pad_rows(rows: torch.Tensor) -> torch.Tensor:
    """rows: [M, I] -> [row_bucket(M), I]: rows itself where M is a bucket; a view past
    its end where its storage holds the bucket's rows (``kernels/row_bucket.empty_rows``:
    those rows' products are cut off, whatever they hold); else zero rows appended (a copy
    of M x I elements: at the Qwen3-0.6B shape 1.75 ms a layer for 1,801 rows)."""
    m, i = rows.shape
    bucket = row_bucket(m)
    if bucket == m:
        return rows
    if rows.is_contiguous():
        size = rows.element_size()
        if (rows.storage_offset() + bucket * i) * size <= rows.untyped_storage().nbytes():
            return rows.as_strided((bucket, i), (i, 1))  # deliberate read past M
    return F.pad(rows, (0, 0, 0, bucket - m))


def packed_product(
    rows: torch.Tensor,
    packed: torch.Tensor,
    bias: torch.Tensor | None,
    attr: str = "none",
    algorithm: str = "",
) -> torch.Tensor:
    """rows: [M, I] times a oneDNN-packed weight (+ bias, then the post-op ``attr`` with its
    ``algorithm``) -> [M, O], multiplied at :func:`row_bucket` rows (:func:`pad_rows`) and
    the padding cut off (the output a contiguous prefix)."""
    m = rows.shape[0]
    op = torch.ops.mkldnn._linear_pointwise
    return op(pad_rows(rows), packed, bias, attr, [], algorithm)[:m]


def supported_dtypes() -> frozenset[torch.dtype]:
    """The weight dtypes this host's torch can prepack with oneDNN (empty: none): float32,
    and bfloat16 (natively, or widened: :func:`compute_dtype`)."""
    if not torch.backends.mkldnn.is_available():
        return frozenset()
    ops = torch.ops.mkldnn
    if not (hasattr(ops, "_reorder_linear_weight") and hasattr(ops, "_linear_pointwise")):
        return frozenset()
    return frozenset({torch.float32, torch.bfloat16})


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a packed linear with ``dtype`` weights computes in: its own, but float32
    for bfloat16 on a CPU without native bf16 (widened, see the module doc)."""
    if dtype == torch.bfloat16 and not native_bf16():
        return torch.float32
    return dtype


class OneDNNLinear(nn.Linear):
    """An :class:`nn.Linear` whose matmul runs on a oneDNN-prepacked copy of its weight
    (widened to float32 for a bfloat16 weight where :func:`compute_dtype` says so), and,
    where the CPU has a few-rows kernel (:func:`few_rows_kernel`), on a copy packed for it
    for up to :func:`few_rows_max` rows (or for every row count where only that copy fits:
    ``with_onednn`` False)."""

    packed: torch.Tensor | None = None  # oneDNN's blocked layout of weight
    few_packed: torch.Tensor | None = None  # the few-rows kernel's layout of weight
    with_few = False  # whether this linear keeps a few-rows copy
    with_onednn = True  # whether it keeps the oneDNN one
    packed_bias: torch.Tensor | None = None  # bias in the compute dtype (widened: float32)
    widened = False  # a bf16 weight computed in float32 (compute_dtype), copy or not
    # the weight's and the bias's _version() when packed (a widened bias is a copy too);
    # None: stale, repack at the next forward
    packed_version: tuple[tuple[int, int], tuple[int, int] | None] | None = None
    pack_count = 0  # how many times packed: copies derived from this one follow it
    # The few-rows kernel of few_packed and the most rows it takes (set when packed: a
    # decode step asks for them at every linear).
    few_kernel: ModuleType | None = None
    few_max = 0

    def _pack(self) -> None:
        w = self.weight.detach()  # [O, I]
        wide = compute_dtype(w.dtype)
        kernel = few_rows_kernel() if self.with_few else None
        self.few_packed = kernel.pack(w) if kernel is not None else None  # [ceil(O/32)*32*I]
        self.few_kernel = kernel if self.few_packed is not None else None
        self.few_max = few_rows_max(self.out_features, self.in_features)
        self.packed = None
        if self.with_onednn:
            self.packed = torch.ops.mkldnn._reorder_linear_weight(w.to(wide), BATCH_HINT)
        bias = self.bias
        self.packed_bias = None if bias is None else bias.detach().to(wide)
        self.widened = wide != w.dtype
        self.packed_version = self._versions()
        self.pack_count += 1

    def _versions(self) -> tuple[tuple[int, int], tuple[int, int] | None]:
        return (_version(self.weight), None if self.bias is None else _version(self.bias))

    def onednn_packed(self, x: torch.Tensor) -> torch.Tensor | None:
        """The oneDNN copy when :meth:`forward` would multiply ``x`` on it unwidened (a post-op
        can then ride the matmul: ``models/fused_linear.py``); None on every other path."""
        if self.packed_version != self._versions():
            self._pack()
        packed = self.packed
        if packed is None or self.widened or x.dtype != self.weight.dtype:
            return None
        if x.device.type != "cpu" or x.dim() < 2:
            return None
        if self.few_packed is not None and x.numel() // x.shape[-1] <= self.few_max:
            return None  # few rows take the few-rows copy
        return packed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [..., I] -> [..., O]."""
        if self.packed_version != self._versions():
            self._pack()  # first call, or the weight or bias was rewritten in place
        if x.dtype != self.weight.dtype or x.device.type != "cpu":
            return F.linear(x, self.weight, self.bias)
        flat = x.dim() == 2
        rows = x if flat else x.reshape(-1, x.shape[-1])  # [M, I]
        few, packed, kernel = self.few_packed, self.packed, self.few_kernel
        if few is not None and (packed is None or rows.shape[0] <= self.few_max):
            assert kernel is not None
            out = kernel.linear(rows, few, self.out_features, self.packed_bias)
            return out if flat else out.view(*x.shape[:-1], out.shape[-1])  # [..., O]
        if self.widened:
            # Few rows (decode, a speculative verify) are bound by reading the weight: the
            # native kernel reads the bf16 weight, half the widened copy's bytes, with the
            # same arithmetic (2-core AMD EPYC, AVX2, Qwen3-0.6B's linears at 1-32 rows:
            # 1.1-4x).
            few = bf16_linear.linear(rows, self.weight, self.packed_bias)
            if few is not None:
                return few.view(*x.shape[:-1], few.shape[-1])  # [..., O]
        if packed is None:  # no copy fitted in memory (prepack_linears): torch's product
            return F.linear(x, self.weight, self.bias)
        if self.widened:  # exact bf16 -> fp32, one rounding back
            if rows.shape[0] == 1:
                # No native kernel: for one row torch's bf16 product, on half the bytes,
                # still beats the widened copy (75M shapes: lm_head 7.1 -> 4.2 ms).
                return F.linear(x, self.weight, self.bias)
            rows = rows.to(packed.dtype)
        out = packed_product(rows, packed, self.packed_bias)  # [M, O]
        if out.dtype != x.dtype:
            out = out.to(x.dtype)  # [M, O]
        return out.view(*x.shape[:-1], out.shape[-1])  # [..., O]


def invalidate_packed(model: nn.Module) -> None:
    """Weights were written (a weight update): every packed copy is rebuilt at its next
    forward. The version check alone misses writes through ``.data`` or into a tied
    weight's other owner."""
    for module in model.modules():
        if isinstance(module, OneDNNLinear):
            module.packed_version = None


def _version(w: torch.Tensor) -> tuple[int, int]:
    """(storage address, in-place write count): changes when the weight is rewritten."""
    try:
        count = w._version
    except RuntimeError:  # an inference tensor has no version counter: address only
        count = 0
    return (w.data_ptr(), count)


def prepack_linears(model: nn.Module) -> int:
    """Make every CPU linear of ``model`` with a supported dtype a :class:`OneDNNLinear`
    (packed now). Returns how many; 0 where this host has no oneDNN path. Where the
    packed copies would take more than :data:`MAX_FREE_MEMORY_SHARE` of the free memory,
    none is made: only widened bf16 linears convert, without copies (their decode reads the
    bf16 weight through the native kernel, their prefill runs on ``F.linear``).
    Where the CPU has a few-rows kernel (:func:`few_rows_kernel`) a bf16 linear gets a copy
    for it beside the oneDNN one, or instead of it where both would not fit in that share."""
    dtypes = supported_dtypes()
    chosen = []
    for module in model.modules():
        if type(module) is not nn.Linear:
            continue
        w = module.weight
        if w.device.type != "cpu" or w.dtype not in dtypes or w.dim() != 2:
            continue
        if module.bias is not None and module.bias.dtype != w.dtype:
            continue
        chosen.append(module)
    nbytes = {m: m.weight.numel() * compute_dtype(m.weight.dtype).itemsize for m in chosen}
    kernel = few_rows_kernel()
    few = {id(m) for m in chosen if compute_dtype(m.weight.dtype) == torch.bfloat16
           and kernel is not None and kernel.takes(m.weight)}  # fmt: skip
    extra = sum(nbytes.values())  # one copy each
    both = extra + sum(nbytes[m] for m in chosen if id(m) in few)  # few-rows ones keep two
    free = _free_memory_bytes()
    budget = None if free is None else MAX_FREE_MEMORY_SHARE * free
    if free is not None and budget is not None and extra > budget:  # both named: mypy narrows each
        # No copies. Widened bf16 linears still take the native kernel for few rows, which
        # reads the weight itself (decode at full speed; prefill on torch's bf16 product).
        wide = [m for m in chosen if compute_dtype(m.weight.dtype) != m.weight.dtype]
        logger.info(
            "CPU linears get no packed copies: they (%.1f GB) would take over %d%% of the "
            "free memory (%.1f GB); %d bf16 linears decode on the native kernel",
            extra / 1e9, int(MAX_FREE_MEMORY_SHARE * 100), free / 1e9, len(wide),
        )  # fmt: skip
        for module in wide:
            _convert(module, with_few=False, with_onednn=False)
        return len(wide)
    # Where the second copies do not fit, few-rows linears keep that copy alone, for every M.
    few_only = budget is not None and both > budget
    if few and few_only:
        logger.info(
            "bf16 linears run on %s for every row count: oneDNN copies beside them "
            "(%.1f GB) would take over %d%% of the free memory",
            getattr(kernel, "__name__", "?"), both / 1e9, int(MAX_FREE_MEMORY_SHARE * 100),
        )  # fmt: skip
    for module in chosen:
        with_few = id(module) in few
        _convert(module, with_few=with_few, with_onednn=not (with_few and few_only))
    return len(chosen)


def _convert(module: nn.Linear, *, with_few: bool, with_onednn: bool) -> None:
    """``module`` becomes a :class:`OneDNNLinear` keeping the copies named, packed now."""
    module.__class__ = OneDNNLinear
    assert isinstance(module, OneDNNLinear)
    module.with_few = with_few
    module.with_onednn = with_onednn
    with torch.no_grad():
        module._pack()


def _free_memory_bytes() -> int | None:
    """Memory available now: /proc/meminfo's MemAvailable (page cache counts as free),
    else free physical pages; None where the OS says neither."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
