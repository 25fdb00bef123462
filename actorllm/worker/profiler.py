"""``TorchProfiler``: the torch profiler behind ``start_profile`` / ``stop_profile``.

Started and stopped on the worker thread (Kineto requires one thread for both), with
``profile_all_threads`` so the trace also covers the event-loop thread. CPU activities
always, CUDA too when the device is a GPU. ``stop`` writes one Chrome trace
(``<dir>/actorllm-<pid>-<n>.trace.json``; open it in Perfetto or chrome://tracing).
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any, final


class ProfilerError(RuntimeError):
    """Profiling is disabled (no ``profiler_dir``), or start/stop were called out of order."""


@final
class TorchProfiler:
    def __init__(self, out_dir: str | Path | None, *, cuda: bool = False) -> None:
        self.out_dir = None if out_dir is None else Path(out_dir)
        self.cuda = cuda
        self._prof: Any = None  # the running torch.profiler.profile, or None
        self._count = itertools.count(1)
        self.traces: list[Path] = []  # written so far

    @property
    def running(self) -> bool:
        return self._prof is not None

    def start(self) -> None:
        if self.out_dir is None:
            raise ProfilerError(
                "profiling is disabled: start the engine with profiler_dir set "
                "(EngineConfig.profiler_dir, --profiler-dir)."
            )
        if self._prof is not None:
            raise ProfilerError("the profiler is already running; call stop_profile() first.")
        import torch.profiler
        from torch._C._profiler import _ExperimentalConfig

        from actorllm.kernels import native_ranges

        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        prof = torch.profiler.profile(
            activities=activities,
            record_shapes=True,
            experimental_config=_ExperimentalConfig(profile_all_threads=True),
        )
        prof.start()
        self._prof = prof
        native_ranges.record_ranges(True)  # the model thread runs them: name them in the trace

    def stop(self) -> Path:
        """Stop and write the trace; returns its path."""
        prof, self._prof = self._prof, None
        if prof is None:
            raise ProfilerError("the profiler is not running; call start_profile() first.")
        from actorllm.kernels import native_ranges

        native_ranges.record_ranges(False)
        prof.stop()
        assert self.out_dir is not None  # start() checked it
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = self.out_dir / f"actorllm-{os.getpid()}-{next(self._count)}.trace.json"
        prof.export_chrome_trace(str(path))
        self.traces.append(path)
        return path
