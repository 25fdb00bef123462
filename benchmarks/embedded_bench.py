"""The same ``LLM.generate`` in a fresh process vs one whose host already ran torch work.

Each case runs in its own fresh process; cases alternate round by round (interleaved), and
the medians of output tokens/s are reported. The host's earlier work is one of:

* ``none``: nothing before the engine;
* ``thread``: another live thread ran one parallel torch op (it keeps an OpenMP team);
* ``thread-released``: the same, and that thread then called
  ``actorllm.utils.release_openmp_team()`` (what an embedding application can do);
* ``hf``: transformers ``generate`` on the main thread (what issue 17 reported);
* ``engine``: another actorllm engine, of the same model in bfloat16 (so another set of
  weights, packed linears and KV cache), ran a few requests and was closed (a test harness
  that builds one engine after another; docs/cpu_performance.md, "the engine after another
  model's engine").

crossed with the engine's ``cpu_omp_short_spin`` off (the default) and on. Off, the
engine frees the idle OpenMP team the host's earlier work left on the thread that starts
or calls it, so ``none`` and ``hf`` should read the same, fast; a live ``thread`` keeps its
team and libgomp's short-spin regime (actorllm/worker/omp_spin.py). On, every case takes
that regime.

    python benchmarks/embedded_bench.py --rounds 3 \
        --output-json benchmarks/results/embedded.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

HOSTS = ("none", "thread", "thread-released", "hf", "engine")
CASES = [(host, spin) for spin in (False, True) for host in HOSTS]


def one_case(host: str, short_spin: bool, num_prompts: int, output_len: int) -> float:
    """Output tokens/s of one timed ``LLM.generate`` after the host's earlier work."""
    import torch

    from actorllm.bench.presets import PRESETS
    from actorllm.core.sampling_params import SamplingParams

    p = PRESETS["llama-4l-256"]
    reqs = p.requests()[:num_prompts]
    if host in ("thread", "thread-released"):
        from actorllm.utils import release_openmp_team

        ready = threading.Event()

        def hold() -> None:
            torch.randn(512, 512) @ torch.randn(512, 512)
            if host == "thread-released":
                release_openmp_team()
            ready.set()
            threading.Event().wait()

        threading.Thread(target=hold, daemon=True).start()
        ready.wait()
    elif host == "hf":
        from actorllm.bench.hf_baseline import load_hf_model, run_hf

        model = load_hf_model(p.model_dir(), dtype="float32", load_format="dummy")
        run_hf(reqs[:4], model, batch_size=4, temperature=0.6)
        del model
    elif host == "engine":
        other = _preset_llm(p, "bfloat16")
        try:
            warm = [{"prompt_token_ids": r.prompt_token_ids} for r in reqs[:4]]
            other.generate(warm, SamplingParams(max_tokens=16, ignore_eos=True), use_tqdm=False)
        finally:
            other.close()
    llm = _preset_llm(p, "float32", cpu_omp_short_spin=short_spin)
    try:
        prompts: list[Any] = [{"prompt_token_ids": r.prompt_token_ids} for r in reqs]
        params = [
            SamplingParams(
                max_tokens=output_len, ignore_eos=True, temperature=0.6, detokenize=False
            )
            for _ in reqs
        ]
        llm.generate(prompts[:1], params[:1], use_tqdm=False)  # warm-up
        start = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        elapsed = time.perf_counter() - start
    finally:
        llm.close()
    return sum(len(o.outputs[0].token_ids) for o in outs) / elapsed


def _preset_llm(preset: Any, dtype: str, **config: Any) -> Any:
    """An ``LLM`` on the preset's model with dummy weights and a 256 MiB KV cache."""
    from actorllm import LLM

    return LLM(
        str(preset.model_dir()),
        dtype=dtype,
        load_format="dummy",
        max_model_len=preset.max_model_len(),
        kv_cache_memory_bytes=256 * 2**20,
        **config,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--num-prompts", type=int, default=8)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--output-json", default=None)
    ap.add_argument("--hosts", default=",".join(HOSTS), help="comma list of host cases to run")
    ap.add_argument(
        "--short-spin", choices=("both", "off", "on"), default="both", help="engine setting"
    )
    ap.add_argument("--case", default=None, help=argparse.SUPPRESS)  # child: host,spin
    args = ap.parse_args()
    if args.case:
        host, spin = args.case.split(",")
        print(json.dumps(one_case(host, spin == "on", args.num_prompts, args.output_len)))
        return 0
    runs: dict[str, list[float]] = {}
    hosts = args.hosts.split(",")
    unknown = sorted(set(hosts) - set(HOSTS))
    if unknown:
        ap.error(f"--hosts: unknown case(s) {unknown}; known: {list(HOSTS)}")
    spins = {"both": (False, True), "off": (False,), "on": (True,)}[args.short_spin]
    cases = [(host, spin) for host, spin in CASES if host in hosts and spin in spins]
    for _ in range(args.rounds):
        for host, spin in cases:
            key = f"host={host} short_spin={'on' if spin else 'off'}"
            cmd = [sys.executable, __file__, "--case", f"{host},{'on' if spin else 'off'}"]
            cmd += ["--num-prompts", str(args.num_prompts), "--output-len", str(args.output_len)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            runs.setdefault(key, []).append(float(out.strip().splitlines()[-1]))
            print(
                f"{key}: {runs[key][-1]:.1f} out tok/s (load {os.getloadavg()[0]:.1f})", flush=True
            )
    medians = {k: statistics.median(v) for k, v in runs.items()}
    print()
    for k, v in medians.items():
        print(f"{k:32s} median {v:8.1f} out tok/s  runs {[round(x, 1) for x in runs[k]]}")
    if args.output_json:
        from actorllm.bench.machine import result_document, write_json

        figures = {"median_output_tokens_per_s": medians, "runs": runs}
        write_json(
            args.output_json, result_document("embedded", figures=figures, config=vars(args))
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
