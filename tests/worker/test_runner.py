"""The Runner protocol (worker/runner.py): every runner the worker drives satisfies it, and
every replica worker the executor drives satisfies ReplicaWorker. mypy checks the same
structurally (``_conforms`` at the end of each implementing module)."""

from __future__ import annotations

from pathlib import Path

import pytest

from actorllm.core.scheduler_output import SchedulerOutput
from actorllm.testing.scripted_model import ScriptedModel
from actorllm.worker.runner import FinishedStep, Runner
from actorllm.worker.worker import ReplicaWorker, Worker
from tests.helpers.models import make_tiny_checkpoint


def test_the_scripted_model_is_a_runner_whose_steps_finish_at_launch() -> None:
    model = ScriptedModel()
    assert isinstance(model, Runner)
    model.initialize_kv_cache(8)
    handle = model.launch(SchedulerOutput.empty(3))
    assert isinstance(handle, FinishedStep) and handle.done()
    assert handle.result().step_id == 3
    # What it lacks is stated, not missing: no weights, no KV tensors, no device to profile.
    assert model.model is None and model.kv_caches is None and model.comm is None
    assert model.profile_num_blocks(0.9) is None and model.kv_group_windows == (None,)
    assert list(model.model_config.eos_token_ids) == [0]


def test_the_model_runner_is_a_runner(tmp_path: Path) -> None:
    from actorllm.worker.model_runner import ModelRunner

    runner = ModelRunner(make_tiny_checkpoint(tmp_path, "llama"), dtype="float32")
    assert isinstance(runner, Runner)
    assert runner.model is None and runner.comm is None  # before load_model


def test_the_local_and_the_remote_worker_are_replica_workers() -> None:
    worker = Worker(ScriptedModel(), lambda: False)
    assert _members(ReplicaWorker) <= set(dir(worker))
    remote = pytest.importorskip("actorllm.worker.remote")  # imports Ray only when used
    assert _members(ReplicaWorker) <= set(dir(remote.RemoteWorker)) | {"profiler"}


def _members(protocol: type) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")}
