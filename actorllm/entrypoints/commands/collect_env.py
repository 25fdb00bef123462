"""``actorllm collect-env``: the environment a bug report needs, as ``vllm collect-env``
prints it: versions (actorllm, Python, torch, transformers), the platform, the CPU (model,
cores, the instruction sets the kernels pick from), the GPU if any, and the ``ACTORLLM_*``
/ ``VLLM_*`` variables set.

    $ actorllm collect-env
"""

from __future__ import annotations

import argparse

HELP = "print the environment (versions, CPU, GPU, settings) for a bug report"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass  # vLLM's takes none either


def run(args: argparse.Namespace) -> int:
    import os

    import torch

    from actorllm.entrypoints.openai.dev_server_info import env_vars, system_env
    from actorllm.kernels.cpu_features import cpu_flags, cpu_model
    from actorllm.worker.cpu_threads import cgroup_cpu_limit

    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    isa = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")
    rows: list[tuple[str, object]] = [
        *system_env().items(),
        ("cpu_model", cpu_model()),
        ("cpu_affinity", affinity),
        ("cgroup_cpu_limit", cgroup_cpu_limit()),
        ("cpu_flags", " ".join(f for f in isa if f in cpu_flags()) or "-"),
        ("torch_cpu_capability", torch.backends.cpu.get_cpu_capability()),
        ("torch_threads", torch.get_num_threads()),
    ]
    width = max(len(name) for name, _ in rows)
    print("Collecting environment information...")
    for name, value in rows:
        print(f"{name:<{width}} : {value}")
    print("\nEnvironment variables:")
    for name, value in sorted(env_vars().items()) or [("(none set)", "")]:
        print(f"  {name}={value}" if value else f"  {name}")
    return 0
