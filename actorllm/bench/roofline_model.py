"""The floor under a benchmark row: the least time this machine needs for the row's work.

Theory of operation. A decoder step reads every linear weight once (and, in decode, every
running request's K and V) and does ``2 x params`` FLOPs per token in its linears plus its
attention. Neither can go faster than the machine's measured figures
(``benchmarks/roofline.py``): the large-read memory bandwidth and the best measured GEMM
rate (oneDNN's prepacked linear, or the AMX kernel where it is faster) at each linear's
``[N, K]`` shape, measured at a ladder of M (rows per call) and interpolated between
them. So:

* **prefill** costs its FLOPs at the GEMM rates of its chunk (``M = min(max_num_batched_tokens,
  all prompt tokens)``): the linears of every prompt token, causal attention
  (``4 x context x heads x head_dim`` per token and layer, ``context`` = the token's
  position + 1) at the best measured rate, and the LM head for one row per request (the
  last prompt token samples the first output token);
* **decode** is a sequence of steps. All requests arrive at once; at most ``max_num_seqs``
  run, and a waiting one starts when a running one finishes. Each running request
  decodes one token per step (``output_len - 1`` steps: prefill sampled the first), and a
  step costs ``max(bytes / bandwidth, linear time + attention FLOPs / the best rate)``,
  where bytes = every linear weight (LM head included) + the running requests' K and V
  (``2 x layers x kv_heads x head_dim x dtype bytes`` per context token) and the linear
  time is each shape's FLOPs at its measured rate for ``M`` = the running requests.

What it leaves out, so every real engine is slower than the floor: norms, rotary, SiLU,
the residual adds, attention's softmax and its own memory traffic in prefill, the K/V
writes, the embedding lookup, sampling, scheduling, the host between steps, and the weight
reads of prefill (prefill is charged FLOPs only). Two places where an engine could beat
it: an engine that folds decode tokens into a prefill step shares that step's weight read
(at most one read per such step), and the measured GEMM rates are the best of repeated
calls on a cache-warm weight.

    >>> shape = ModelShape(hidden=8, layers=1, heads=2, kv_heads=1, head_dim=4,
    ...                    intermediate=16, vocab=32, tied=True, dtype_bytes=2)
    >>> shape.layer_weight_bytes(), shape.lm_head_bytes(), shape.kv_bytes_per_token()
    (1152, 512, 16)
"""

from __future__ import annotations

import bisect
import json
import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from actorllm.bench.presets import Preset

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

# What must agree between the host that measured the figures and the one they are used on.
MACHINE_KEYS = ("cpu_model", "isa", "torch_threads")


class RooflineUnavailable(Exception):
    """No floor can be drawn (the figures are from another machine, or lack a shape);
    ``str()`` says why, for the table and the JSON."""


@dataclass(frozen=True)
class ModelShape:
    """A decoder's sizes: what the roofline needs of a transformers config."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool  # the LM head shares the embedding: fewer parameters, the same step reads
    dtype_bytes: int

    @classmethod
    def from_config(cls, config: Mapping[str, Any], dtype: str) -> ModelShape:
        """From a transformers config dict (``hidden_size``, ``num_hidden_layers``, ...) and
        a dtype name (``bfloat16``, ``float16``, ``float32``)."""
        if dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPE_BYTES)}, got {dtype!r}")
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        return cls(
            hidden=hidden,
            layers=int(config["num_hidden_layers"]),
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            intermediate=int(config["intermediate_size"]),
            vocab=int(config["vocab_size"]),
            tied=bool(config.get("tie_word_embeddings", False)),
            dtype_bytes=DTYPE_BYTES[dtype],
        )

    def layer_linears(self) -> dict[str, tuple[int, int]]:
        """Each layer's linears as the engine runs them (QKV and gate-up fused): name ->
        weight ``[N, K]`` (out, in)."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return {
            "qkv": (q + 2 * kv, self.hidden),
            "o_proj": (self.hidden, q),
            "gate_up": (2 * self.intermediate, self.hidden),
            "down": (self.hidden, self.intermediate),
        }

    def lm_head(self) -> tuple[int, int]:
        return (self.vocab, self.hidden)

    def linears(self) -> dict[str, tuple[int, int]]:
        """Every distinct linear of a step: the layer's and the LM head."""
        return {**self.layer_linears(), "lm_head": self.lm_head()}

    def layer_weight_bytes(self) -> int:
        return sum(n * k for n, k in self.layer_linears().values()) * self.dtype_bytes

    def lm_head_bytes(self) -> int:
        return self.vocab * self.hidden * self.dtype_bytes

    def weight_bytes(self) -> int:
        """Linear weight bytes one step reads: every layer's and the LM head's."""
        return self.layers * self.layer_weight_bytes() + self.lm_head_bytes()

    def linear_flops_per_token(self) -> int:
        """2 x the layers' linear parameters (the LM head apart: only sampled rows run it)."""
        return 2 * self.layers * sum(n * k for n, k in self.layer_linears().values())

    def lm_head_flops_per_row(self) -> int:
        return 2 * self.vocab * self.hidden

    def attention_flops(self, context: int) -> int:
        """One token attending over ``context`` tokens, all layers: QK^T and PV."""
        return 4 * context * self.heads * self.head_dim * self.layers

    def kv_bytes_per_token(self) -> int:
        """K and V of one context token, all layers: what decode attention reads per token."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes


@dataclass(frozen=True)
class GemmCurve:
    """GFLOP/s of one ``[N, K]`` weight against M, linear in M between measured points,
    held flat above the largest and constant-time (rate proportional to M) below the
    smallest."""

    points: tuple[tuple[int, float], ...]  # ((M, GFLOP/s), ...) by increasing M

    def gflops(self, m: float) -> float:
        ms = [p[0] for p in self.points]
        i = bisect.bisect_left(ms, m)
        if i < len(ms) and ms[i] == m:
            return self.points[i][1]
        if i == 0:
            m0, r0 = self.points[0]
            return r0 * m / m0
        if i == len(ms):
            return self.points[-1][1]
        (m0, r0), (m1, r1) = self.points[i - 1], self.points[i]
        return r0 + (r1 - r0) * (m - m0) / (m1 - m0)

    def peak(self) -> float:
        return max(r for _, r in self.points)


@dataclass(frozen=True)
class MachineFigures:
    """This machine's measured floors, as ``benchmarks/roofline.py`` writes them."""

    read_gbs: float
    gemm: dict[str, dict[tuple[int, int], GemmCurve]]  # {dtype: {(N, K): curve}}

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> MachineFigures:
        """From roofline.py's JSON: ``figures.bandwidth.read_gbs`` and
        ``figures.linear_gemm[dtype]["NxK"] = {"n", "k", "by_m": {"M": {"gflops"}}}``."""
        figures = doc.get("figures")
        if not isinstance(figures, dict) or "bandwidth" not in figures:
            raise RooflineUnavailable("the file has no figures.bandwidth (not roofline.py's)")
        gemm: dict[str, dict[tuple[int, int], GemmCurve]] = {}
        for dtype, shapes in (figures.get("linear_gemm") or {}).items():
            for entry in shapes.values():
                points = sorted((int(m), float(f["gflops"])) for m, f in entry["by_m"].items())
                key = (int(entry["n"]), int(entry["k"]))
                gemm.setdefault(dtype, {})[key] = GemmCurve(tuple(points))
        return cls(read_gbs=float(figures["bandwidth"]["read_gbs"]), gemm=gemm)

    def curve(self, dtype: str, name: str, nk: tuple[int, int]) -> GemmCurve:
        try:
            return self.gemm[dtype][nk]
        except KeyError:
            raise RooflineUnavailable(
                f"no {dtype} GEMM figures for {name} [{nk[0]}x{nk[1]}] "
                "(run benchmarks/roofline.py --shapes with this preset)"
            ) from None

    def peak_gflops(self, dtype: str) -> float:
        """The best rate measured at any shape and M: attention's FLOPs are charged at it."""
        curves = self.gemm.get(dtype)
        if not curves:
            raise RooflineUnavailable(f"no {dtype} GEMM figures in the roofline file")
        return max(c.peak() for c in curves.values())


def record_gemm(
    table: dict[str, Any],
    dtype: str,
    name: str,
    nk: tuple[int, int],
    m: int,
    figure: Mapping[str, float],
) -> None:
    """Add one measured GEMM (``{"ms", "gflops"}`` of ``[M, K] x [N, K]^T``) to the
    ``linear_gemm`` table of roofline.py's JSON, in the form :meth:`MachineFigures.from_document`
    reads: ``table[dtype]["NxK"] = {"n", "k", "used_by": [names], "by_m": {"M": figure}}``."""
    n, k = nk
    entry = table.setdefault(dtype, {}).setdefault(
        f"{n}x{k}", {"n": n, "k": k, "used_by": [], "by_m": {}}
    )
    if name not in entry["used_by"]:
        entry["used_by"].append(name)
    entry["by_m"][str(m)] = dict(figure)


@dataclass(frozen=True)
class RooflineFloor:
    """The floor of one workload, and how it splits."""

    floor_s: float  # prefill_s + decode_s
    prefill_s: float
    decode_s: float
    decode_memory_s: float  # decode steps bound by bytes / bandwidth, their total
    decode_compute_s: float  # decode steps bound by the GEMM rates, their total
    decode_steps: int
    memory_bound_steps: int
    decode_bytes: int  # weights + K/V read over all decode steps
    prefill_flops: int
    decode_flops: int
    bound: Literal["memory", "compute"]  # which side holds more of floor_s

    @property
    def flops(self) -> int:
        return self.prefill_flops + self.decode_flops

    def to_dict(self) -> dict[str, Any]:
        return {
            "floor_s": self.floor_s,
            "prefill_s": self.prefill_s,
            "decode_s": self.decode_s,
            "decode_memory_s": self.decode_memory_s,
            "decode_compute_s": self.decode_compute_s,
            "decode_steps": self.decode_steps,
            "memory_bound_steps": self.memory_bound_steps,
            "decode_bytes": self.decode_bytes,
            "prefill_flops": self.prefill_flops,
            "decode_flops": self.decode_flops,
            "bound": self.bound,
        }


@dataclass
class _Running:
    context: int  # tokens the next decode token attends over (itself included)
    left: int  # decode steps still to run


def workload_floor(
    shape: ModelShape,
    dtype: str,
    requests: Sequence[tuple[int, int]],
    machine: MachineFigures,
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
) -> RooflineFloor:
    """The floor of ``requests`` (``(prompt_len, output_len)`` pairs, all arriving at once,
    admitted in order). Raises :class:`RooflineUnavailable` if ``machine`` lacks a linear
    of ``shape`` in ``dtype``, ``ValueError`` on an empty workload or a length below 1."""
    if not requests:
        raise ValueError("requests must not be empty")
    if any(p < 1 or o < 1 for p, o in requests):
        raise ValueError("every prompt_len and output_len must be at least 1")
    if max_num_seqs < 1 or max_num_batched_tokens < 1:
        raise ValueError("max_num_seqs and max_num_batched_tokens must be at least 1")
    curves = {name: machine.curve(dtype, name, nk) for name, nk in shape.linears().items()}
    peak = machine.peak_gflops(dtype) * 1e9
    bandwidth = machine.read_gbs * 1e9

    def linear_s(name: str, rows: int, m: float) -> float:
        """``rows`` tokens through linear ``name`` (all layers) at the rate of M = ``m``."""
        n, k = shape.linears()[name]
        calls = 1 if name == "lm_head" else shape.layers
        return calls * 2 * rows * n * k / (curves[name].gflops(m) * 1e9)

    # Prefill: FLOPs only, at the chunk's M.
    prompt_tokens = sum(p for p, _ in requests)
    m_chunk = min(max_num_batched_tokens, prompt_tokens)
    sampled = len(requests)
    attn_prefill = sum(shape.attention_flops(p * (p + 1) // 2) for p, _ in requests)
    prefill_s = sum(linear_s(name, prompt_tokens, m_chunk) for name in shape.layer_linears())
    prefill_s += linear_s("lm_head", sampled, min(sampled, max_num_seqs))
    prefill_s += attn_prefill / peak
    prefill_flops = (
        prompt_tokens * shape.linear_flops_per_token()
        + sampled * shape.lm_head_flops_per_row()
        + attn_prefill
    )

    # Decode: steps over the running requests, waiting ones admitted as slots free.
    waiting = deque(_Running(p + 1, o - 1) for p, o in requests if o > 1)
    running: list[_Running] = []
    step_linear_s: dict[int, float] = {}  # {M: linear seconds of a step of M rows}
    weight_bytes, kv_per_token = shape.weight_bytes(), shape.kv_bytes_per_token()
    flops_per_row = shape.linear_flops_per_token() + shape.lm_head_flops_per_row()
    decode_memory_s = decode_compute_s = 0.0
    steps = memory_steps = decode_bytes = decode_flops = 0
    while waiting or running:
        while waiting and len(running) < max_num_seqs:
            running.append(waiting.popleft())
        m = len(running)
        contexts = sum(r.context for r in running)
        if m not in step_linear_s:
            step_linear_s[m] = sum(linear_s(name, m, m) for name in shape.linears())
        step_bytes = weight_bytes + contexts * kv_per_token
        attn = shape.attention_flops(contexts)
        memory_s = step_bytes / bandwidth
        compute_s = step_linear_s[m] + attn / peak
        if memory_s >= compute_s:
            decode_memory_s += memory_s
            memory_steps += 1
        else:
            decode_compute_s += compute_s
        steps += 1
        decode_bytes += step_bytes
        decode_flops += m * flops_per_row + attn
        for r in running:
            r.context += 1
            r.left -= 1
        running = [r for r in running if r.left > 0]

    decode_s = decode_memory_s + decode_compute_s
    bound: Literal["memory", "compute"] = (
        "memory" if decode_memory_s >= prefill_s + decode_compute_s else "compute"
    )
    return RooflineFloor(
        floor_s=prefill_s + decode_s,
        prefill_s=prefill_s,
        decode_s=decode_s,
        decode_memory_s=decode_memory_s,
        decode_compute_s=decode_compute_s,
        decode_steps=steps,
        memory_bound_steps=memory_steps,
        decode_bytes=decode_bytes,
        prefill_flops=prefill_flops,
        decode_flops=decode_flops,
        bound=bound,
    )


def preset_floor(preset: Preset, machine: MachineFigures) -> RooflineFloor:
    """The floor of a ``cpu-vs-vllm`` row: its model, dtype, requests and limits."""
    return workload_floor(
        ModelShape.from_config(preset.model_config, preset.dtype),
        preset.dtype,
        [(len(r.prompt_token_ids), r.output_len) for r in preset.requests()],
        machine,
        max_num_seqs=preset.max_num_seqs,
        max_num_batched_tokens=preset.max_num_batched_tokens,
    )


def percent_of_floor(floor_s: float, output_tokens: int, runs_tok_s: Sequence[float]) -> float:
    """``floor_s`` as a percentage of the median run's duration (``output_tokens`` over
    each run's output tokens/s): 100 means the engine ran at the floor."""
    if not runs_tok_s:
        raise ValueError("runs_tok_s must not be empty")
    return 100.0 * floor_s / statistics.median(output_tokens / r for r in runs_tok_s)


def machine_mismatch(recorded: object, current: Mapping[str, Any]) -> str | None:
    """Why figures measured on ``recorded`` (a result's ``machine`` block) do not hold on
    ``current``, or None when they do: CPU model, ISA and torch threads must agree."""
    if not isinstance(recorded, Mapping):
        return "the file has no machine block (rerun benchmarks/roofline.py)"
    for key in MACHINE_KEYS:
        if recorded.get(key) != current.get(key):
            return f"measured with {key} {recorded.get(key)!r}, this run has {current.get(key)!r}"
    return None


def load_machine_figures(path: str | Path, current: Mapping[str, Any]) -> MachineFigures:
    """Read roofline.py's JSON at ``path`` and check it was measured on ``current`` (see
    :func:`machine_mismatch`). Raises :class:`RooflineUnavailable` saying why not."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as e:
        raise RooflineUnavailable(f"cannot read {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise RooflineUnavailable(f"{path} is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise RooflineUnavailable(f"{path} is not a roofline.py result")
    reason = machine_mismatch(doc.get("machine"), current)
    if reason is not None:
        raise RooflineUnavailable(f"{path}: {reason}")
    return MachineFigures.from_document(doc)
