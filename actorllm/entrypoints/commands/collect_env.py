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
    from actorllm.bench.machine import machine_info
    from actorllm.entrypoints.openai.dev_server_info import env_vars, system_env

    machine = machine_info()
    rows: list[tuple[str, object]] = [
        *system_env().items(),
        ("cpu_model", machine["cpu_model"]),
        ("cpu_affinity", machine["cpu_affinity"]),
        ("cgroup_cpu_limit", machine["cgroup_cpu_limit"]),
        ("cpu_id", machine["isa"]["cpu_id"]),
        ("cpu_flags", " ".join(machine["isa"]["flags"]) or "-"),
        ("torch_cpu_capability", machine["isa"]["torch_cpu_capability"]),
        ("torch_threads", machine["torch_threads"]),
    ]
    width = max(len(name) for name, _ in rows)
    print("Collecting environment information...")
    for name, value in rows:
        print(f"{name:<{width}} : {value}")
    print("\nEnvironment variables:")
    for name, value in sorted(env_vars().items()) or [("(none set)", "")]:
        print(f"  {name}={value}" if value else f"  {name}")
    return 0
