"""The host-side plan of one step's paged attention (:class:`AttentionPlan`), built once
per step on its first layer and reused by every other (``AttentionMetadata.plan_cache``):
which rows decode and which prefill, the decode rows in groups of similar context length
for the grouped SDPA (:func:`group_decode_rows`), the native kernels' row, length and
block-table arguments, the masks, and the gather buffers. ``kernels/attention.py`` runs
the step's attention from it; its module doc says how the CPU runs it fast.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import torch

from actorllm.kernels import kv_quant

# Fixed cost of one decode group per layer, in padded (row x context token) units: what an
# extra gather + SDPA call costs against the per-token work it saves (measured on CPU).
GROUP_COST_TOKENS = 512
_FINE_RATIO = 1.25  # the grouping's candidate cuts: where a context grows 25% past the last
# Requests with up to this many query tokens (speculative verify steps: k + 1 with k <= 7)
# run as decode rows in the native kernel, which reads their context once per row: at a
# verify's few rows that costs less than the bits it keeps (AttentionPlan.build).
SHORT_QUERY_MAX = 8


@dataclass
class DecodeGroup:
    """Decode rows attended in one SDPA call, padded to the longest context among them."""

    q_rows: torch.Tensor  # [N] int64, rows of q
    blocks: torch.Tensor  # [N * nb] int64, each row's first nb blocks
    lens: list[int]  # context length of each row
    max_len: int
    _masks: dict[int | None, torch.Tensor | None] = field(default_factory=dict)

    def mask(self, window: int | None) -> torch.Tensor | None:
        """Additive float mask [1, N, 1, S] (0 or -inf): a row's keys past its length (and
        before its window) are out; None when nothing needs masking."""
        if window not in self._masks:
            lens = self.lens
            if window is None and min(lens) == self.max_len:
                self._masks[window] = None
            else:
                q_pos = torch.tensor(lens) - 1  # [N], each row's query position
                # [N, S], built on the host, kept beside the cache (once per step and window)
                m = _causal_mask(q_pos, self.max_len, window).to(self.blocks.device)
                self._masks[window] = m.view(1, len(lens), 1, self.max_len)
        return self._masks[window]


@dataclass
class Prefill:
    """Query rows [start, end) of q attended causally as a prefill: a request's, or with
    prompt lengths (:meth:`AttentionPlan.build`) one piece of its prompt rows."""

    start: int
    end: int
    seq_len: int  # the context of its last row: seq_len - (end - start) is its first position
    blocks: torch.Tensor  # [nb] int64
    req: int = 0  # the request's index in the step (its block table row)
    # Its rows round the probabilities to bf16 for P.V, through the AMX kernel or bf16 SDPA
    # where the host has AMX (else the native kernel's pairs); a piece not low keeps
    # float32 P, except, planned by position (AttentionPlan.by_position), its rows from
    # the low-precision position on (kernels/attention.py).
    low: bool = False
    _masks: dict[int | None, torch.Tensor] = field(default_factory=dict)

    def mask(self, window: int | None) -> torch.Tensor:
        """Additive float [L, S] (0 or -inf): query i (position seq_len - L + i) sees keys
        up to itself (and, with a window, none before it)."""
        if window not in self._masks:
            self._masks[window] = _additive(self.keep(window))  # beside the cache, as keep()
        return self._masks[window]

    def keep(self, window: int | None) -> torch.Tensor:
        """Bool [L, S]: True where query i (position seq_len - L + i) sees the key."""
        q_pos = torch.arange(self.seq_len - (self.end - self.start), self.seq_len)  # [L]
        return _causal_keep(q_pos, self.seq_len, window).to(self.blocks.device)


def _causal_mask(q_pos: torch.Tensor, length: int, window: int | None) -> torch.Tensor:
    """Additive float [Q, length] (0 or -inf) of :func:`_causal_keep`."""
    return _additive(_causal_keep(q_pos, length, window))


def _causal_keep(q_pos: torch.Tensor, length: int, window: int | None) -> torch.Tensor:
    """Bool [Q, length]: query q (at position ``q_pos[q]``) sees keys ``0 ..= q_pos[q]``,
    and with a window only those ``> q_pos[q] - window``."""
    k_pos = torch.arange(length).unsqueeze(0)  # [1, S]
    last = q_pos.unsqueeze(1)  # [Q, 1]
    keep = k_pos <= last
    if window is not None:
        keep &= k_pos > last - window
    return keep


def _additive(keep: torch.Tensor) -> torch.Tensor:
    return torch.zeros(keep.shape, device=keep.device).masked_fill_(~keep, -math.inf)


@dataclass
class AttentionPlan:
    prefills: list[Prefill]
    # What the decode rows' plans are built from, on first use: a step goes one way (the
    # native kernel or the grouped SDPA), so only that way's plan is ever built.
    _qsl: list[int]
    _lens: list[int]
    _decode_idx: list[int]  # requests with one query token (by position: an output's)
    _block_table: torch.Tensor  # [B, max_blocks] int32
    _block_size: int
    # (request, first row): that request's query rows from the first on run as decode rows
    # in the native kernel, each row as if decoded alone (build's short runs and, with
    # prompt lengths, the output rows of a request with several query tokens)
    _decode_runs: list[tuple[int, int]] = field(default_factory=list)
    # Planned by position (build's prompt_lens): prefill rows are prompt rows only.
    by_position: bool = False
    # Gather destinations (K, V), reused by every group and layer of the step: the same
    # memory, warm in cache, instead of a fresh multi-MB allocation per gather.
    _buffers: list[torch.Tensor | None] = field(default_factory=lambda: [None, None])

    @functools.cached_property
    def decode_groups(self) -> list[DecodeGroup]:
        """The decode rows in groups of similar context length (the grouped SDPA path)."""
        qsl, lens = self._qsl, self._lens
        groups = []
        for rows in group_decode_rows(self._decode_idx, lens):
            max_len = max(lens[i] for i in rows)
            nb = -(-max_len // self._block_size)
            dev = self._block_table.device  # index_select wants the index beside the table
            idx = torch.tensor(rows, device=dev)
            groups.append(
                DecodeGroup(
                    q_rows=torch.tensor([qsl[i] for i in rows], device=dev),
                    blocks=self._block_table.index_select(0, idx)[:, :nb].flatten().long(),
                    lens=[lens[i] for i in rows],
                    max_len=max_len,
                )
            )
        return groups

    @functools.cached_property
    def decodes(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """Every decode row at once, for the native kernel: q rows [N] int64, context
        lengths [N] int32, block tables [N, max_blocks] int32; None without decode rows."""
        qsl, lens = self._qsl, self._lens
        rows = [(qsl[i], lens[i], i) for i in self._decode_idx]
        for i, j0 in self._decode_runs:  # query token j sees the context up to itself
            n = qsl[i + 1] - qsl[i]
            rows += [(qsl[i] + j, lens[i] - n + 1 + j, i) for j in range(j0, n)]
        if not rows:
            return None
        return (
            torch.tensor([r[0] for r in rows]),
            torch.tensor([r[1] for r in rows], dtype=torch.int32),
            self._block_table.index_select(
                0, torch.tensor([r[2] for r in rows], device=self._block_table.device)
            ).to(torch.int32),
        )

    @property
    def short_as_decodes(self) -> bool:
        """Whether rows of requests with several query tokens are planned as decode rows
        (:meth:`build`): without the native decode kernel the plan must be built again."""
        return bool(self._decode_runs)

    def prefill_args(
        self, pieces: list[Prefill]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``pieces`` (of :attr:`prefills`) at once, for the native kernels: first q rows,
        query tokens, context lengths [P] int32, block tables [P, max_blocks] int32."""
        rows = torch.tensor([p.req for p in pieces], device=self._block_table.device)
        return (
            torch.tensor([p.start for p in pieces], dtype=torch.int32),
            torch.tensor([p.end - p.start for p in pieces], dtype=torch.int32),
            torch.tensor([p.seq_len for p in pieces], dtype=torch.int32),
            self._block_table.index_select(0, rows).to(torch.int32),
        )

    def gather(
        self,
        which: int,
        cache: torch.Tensor,
        blocks: torch.Tensor,
        n: int,
        length: int,
        *,
        widen: bool = True,
        scale: float = 1.0,
    ) -> torch.Tensor:
        """The first ``length`` context tokens of ``n`` requests whose ``blocks`` ([n * nb]
        int64, request after request) hold them -> [Hk, n, length, D] (float32, or the
        cache's dtype when not ``widen``), in buffer ``which`` (0: K, 1: V; valid until the
        next gather into the same buffer). An fp8 cache is always widened, times
        ``scale``."""
        if kv_quant.is_fp8(cache.dtype):  # torch's CPU gathers take no float8: its bytes
            kv = self.gather(which, cache.view(torch.uint8), blocks, n, length, widen=False)
            return kv_quant.dequantize(kv.view(cache.dtype), scale)
        _, bs, hk, d = cache.shape
        nb = blocks.shape[0] // n
        phys = cache.permute(2, 0, 1, 3)  # [Hk, NB, BS, D]
        if not phys.is_contiguous():  # [NB, BS, Hk, D] storage: gather blocks, heads first
            kv = cache.index_select(0, blocks).view(n, nb * bs, hk, d).permute(2, 0, 1, 3)
            return kv[:, :, :length].float() if widen else kv[:, :, :length]
        # Head-major storage: the gather lands directly in SDPA's layout.
        size = hk * n * nb * bs * d
        buf = self._buffers[which]
        if buf is None or buf.numel() < size or buf.dtype != cache.dtype:
            buf = torch.empty(size, dtype=cache.dtype, device=cache.device)
            self._buffers[which] = buf
        dest = buf[:size].view(hk, n * nb, bs, d)
        kv = torch.index_select(phys, 1, blocks, out=dest).view(hk, n, nb * bs, d)
        return kv[:, :, :length].float() if widen else kv[:, :, :length]

    @classmethod
    def build(
        cls,
        query_start_loc: torch.Tensor,
        seq_lens: torch.Tensor,
        block_table: torch.Tensor,
        block_size: int,
        *,
        short_as_decodes: bool = False,
        prompt_lens: list[int] | None = None,
        low_from: int | None = None,
    ) -> AttentionPlan:
        """``short_as_decodes`` (the native decode kernel serves the cache): a request with
        2..:data:`SHORT_QUERY_MAX` query tokens (a speculative verify) runs as that many
        decode rows, token j over the context up to itself. Each row is then computed
        exactly as if it were decoded alone, so verifying drafts gives the bits decoding
        them would (the prefill kernel sums in another order); the context is read once
        per row, cheap at the few rows of a verify. ``low_from``: prefills of that many
        query tokens a request or more on average are marked ``low`` (they may round P to
        bf16), all of them or none.

        ``prompt_lens`` ([B], each request's prompt tokens; with ``short_as_decodes``) plans
        every row by its position alone, whatever else the step holds: a row past its
        prompt (an output token: decoded, verified, or prefilled again when a request is
        replayed after a crash or a preemption) runs as a decode row; prompt rows are
        prefill pieces, split at position ``low_from`` (None: not split): only rows from
        there on are ``low``. A row then has the same bits in whichever step, chunk or
        replay computes it, so a replayed request continues with the tokens it would have
        produced.
        """
        # Deliberate host sync: the reference path plans its loops on the host.
        qsl = query_start_loc.tolist()
        lens = seq_lens.tolist()
        if prompt_lens is not None and short_as_decodes:
            return cls._by_position(qsl, lens, block_table, block_size, prompt_lens, low_from)
        decodes = [i for i in range(len(lens)) if qsl[i + 1] - qsl[i] == 1]
        short = [
            i for i in range(len(lens)) if 1 < qsl[i + 1] - qsl[i] <= SHORT_QUERY_MAX
        ] if short_as_decodes else []  # fmt: skip
        as_decodes = set(short)
        prefills = [
            _piece(i, qsl[i], qsl[i + 1], lens[i], block_table, block_size)
            for i in range(len(lens))
            if qsl[i + 1] - qsl[i] > 1 and i not in as_decodes
        ]
        rows = sum(p.end - p.start for p in prefills)
        if prefills and low_from is not None and rows >= low_from * len(prefills):
            for p in prefills:
                p.low = True
        runs = [(i, 0) for i in short]
        return cls(prefills, qsl, lens, decodes, block_table, block_size, _decode_runs=runs)

    @classmethod
    def _by_position(
        cls,
        qsl: list[int],
        lens: list[int],
        block_table: torch.Tensor,
        block_size: int,
        prompt_lens: list[int],
        low_from: int | None,
    ) -> AttentionPlan:
        """:meth:`build` with prompt lengths: each row planned by its position."""
        decodes: list[int] = []
        runs: list[tuple[int, int]] = []
        prefills: list[Prefill] = []
        for i, seq_len in enumerate(lens):
            start, n = qsl[i], qsl[i + 1] - qsl[i]
            first = seq_len - n  # the position of the request's first query row
            m = min(n, max(0, prompt_lens[i] - first))  # its prompt rows, then outputs
            if m == 0 and n == 1:
                decodes.append(i)
            elif m < n:
                runs.append((i, m))
            cut = m if low_from is None else min(m, max(0, low_from - first))
            for a, b, low in ((0, cut, False), (cut, m, True)):
                if a < b:
                    piece = _piece(i, start + a, start + b, first + b, block_table, block_size)
                    piece.low = low
                    prefills.append(piece)
        return cls(
            prefills, qsl, lens, decodes, block_table, block_size, _decode_runs=runs,
            by_position=True,
        )  # fmt: skip


def _piece(
    req: int, start: int, end: int, seq_len: int, block_table: torch.Tensor, block_size: int
) -> Prefill:
    """Rows [start, end) of request ``req``, its last at context ``seq_len``."""
    blocks = block_table[req, : -(-seq_len // block_size)].long()
    return Prefill(start=start, end=end, seq_len=seq_len, blocks=blocks, req=req)


def group_decode_rows(
    rows: list[int], lens: list[int], group_cost: int = GROUP_COST_TOKENS
) -> list[list[int]]:
    """Decode rows split into groups by context length, minimising the padded work
    (rows x longest context, per group) plus ``group_cost`` per group.

    Rows are sorted by length and cut only where the length has grown ``_FINE_RATIO``
    past the previous cut (few candidates), then the best cuts among those are chosen by
    dynamic programming over the candidates.
    """
    if not rows:
        return []
    order = sorted(rows, key=lens.__getitem__)
    # Fine runs: [start, end) slices of `order` whose lengths stay within _FINE_RATIO.
    bounds = [0]
    base = lens[order[0]]
    for j in range(1, len(order)):
        if lens[order[j]] > _FINE_RATIO * base:
            bounds.append(j)
            base = lens[order[j]]
    bounds.append(len(order))
    k = len(bounds) - 1
    # best[j]: cheapest cost of the rows before bounds[j]; cut[j]: where its last group starts.
    best = [0.0] + [math.inf] * k
    cut = [0] * (k + 1)
    for j in range(1, k + 1):
        longest = lens[order[bounds[j] - 1]]
        for i in range(j):
            cost = best[i] + group_cost + (bounds[j] - bounds[i]) * longest
            if cost < best[j]:
                best[j], cut[j] = cost, i
    groups = []
    j = k
    while j > 0:
        groups.append(order[bounds[cut[j]] : bounds[j]])
        j = cut[j]
    return groups[::-1]
