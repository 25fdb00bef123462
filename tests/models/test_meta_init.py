"""Modules built on meta skip their initialisers, without importing torch._dynamo."""

from __future__ import annotations

import subprocess
import sys
import threading

import torch
from torch.nn import init

from actorllm.models.meta_init import on_meta

SCRIPT = """
import sys, torch
from actorllm.models.meta_init import on_meta
with on_meta():
    torch.nn.Embedding(64, 8), torch.nn.Linear(8, 8), torch.nn.LayerNorm(8)
print("torch._dynamo" in sys.modules)
"""


def test_building_on_meta_does_not_import_dynamo() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False", out.stderr


def test_parameters_are_on_meta_and_real_tensors_still_initialised() -> None:
    real = torch.zeros(4)
    with on_meta():
        layer = torch.nn.Linear(8, 8)
        init.ones_(real)  # the host's own tensor, meanwhile
    assert layer.weight.is_meta and layer.bias.is_meta
    assert torch.equal(real, torch.ones(4))


def test_initialisers_are_restored_after_overlapping_builders() -> None:
    before = init.normal_
    entered, release = threading.Event(), threading.Event()

    def other() -> None:
        with on_meta():
            entered.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    entered.wait(10)
    with on_meta():
        torch.nn.Embedding(4, 2)
    assert init.normal_ is not before  # the other builder is still inside
    release.set()
    thread.join()
    assert init.normal_ is before
