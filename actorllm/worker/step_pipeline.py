"""Worker-thread side of async scheduling: launch step N+1 before waiting for step N.

Theory of operation
-------------------
Under async scheduling the engine queues step N+1 on the worker thread while step N still
runs. ``Runner.launch(so)`` (worker/runner.py) returns as soon as a step's kernels are
queued on the device (the CUDA path); its handle's ``result()`` waits for the sampled ids.
The pipeline launches each step as it arrives and resolves the oldest pending step as soon
as its result is ready (``done()``: always on CPU, where launching computes the step), when
another step is already pending (N+1 is on the device, so N's host copy can be waited for
without idling the GPU), or when nothing else is queued on the thread (no point waiting).
Steps resolve in launch order. Any other job on the thread (sleep, reset) must
call :meth:`flush` first, and so does a step whose grammar bitmask waits for an earlier
step's tokens (structured outputs under async scheduling). A runner that computes the step
at launch (the ScriptedModel, the CPU path) hands back a done handle: it is posted at once.

Pipeline parallel (``depth`` = the stages): a step's handle is ready once the previous
stage's hidden states are here; up to ``depth`` steps stay pending, and while the oldest is
not ready the thread waits for it *or* for the next job, whichever comes first, so the next
step goes out to the first stage while the later stages still work on this one.

Everything here runs on the worker thread, except the ``post`` callbacks' effect (they hand
outcomes to the event loop).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.scheduler_output import SchedulerOutput
from actorllm.worker.runner import Runner, StepHandle
from actorllm.worker.worker_thread import Outcome

Post = Callable[[Outcome[ModelRunnerOutput]], None]

POLL_S = 0.0002  # pipeline parallel: how often a wait for the oldest step looks for a job


class StepPipeline:
    def __init__(self, runner: Runner, has_queued_jobs: Callable[[], bool], depth: int = 1) -> None:
        self._runner = runner
        self._has_queued_jobs = has_queued_jobs
        # Pipeline parallel: the stages (steps pending at most); 1: not pipelined.
        self.depth = depth
        # Steps launched whose outcome is not posted yet: (handle, post), launch order.
        self._unposted: deque[tuple[StepHandle, Post]] = deque()
        self.max_pending_seen = 0  # statistics: 2 means steps really overlapped

    def run_step(
        self, so: SchedulerOutput, post: Post, before: Callable[[], None] | None = None
    ) -> None:
        """Launch ``so`` (after ``before``, e.g. KV connector loads), then resolve what
        can be resolved. Every step's outcome is posted exactly once, in order."""
        grammar = so.grammar_bitmask
        if grammar is not None:
            grammar.start()  # the rows fill beside this step's forward pass
        if grammar is not None and grammar.waits_for_inflight:
            # Its sampling waits for the scheduler to apply earlier steps' tokens: post
            # them first. (On CPU they are posted already; on CUDA this gives up the
            # launch-ahead for such steps, vLLM defers only the sampling instead.)
            self.flush()
        try:
            if before is not None:
                before()
            handle = self._runner.launch(so)
        except BaseException as exc:  # reported to the loop, never lost on this thread
            self.flush()
            post(Outcome(error=exc))
            return
        self._unposted.append((handle, post))
        self.max_pending_seen = max(self.max_pending_seen, len(self._unposted))
        # Resolve the oldest step when its result is already there (on CPU, always: the
        # launch computed it), when a newer step is on the device behind it, or when
        # nothing else is queued. Holding a finished result back would only delay the
        # scheduler by a whole step.
        if self.depth > 1:
            self._drain_pipelined()
            return
        while self._unposted and (
            len(self._unposted) > 1 or self._unposted[0][0].done() or not self._has_queued_jobs()
        ):
            self._resolve_oldest()

    def _drain_pipelined(self) -> None:
        """Resolve the oldest step when ``depth`` are pending or it is ready; otherwise
        wait until it is ready or another job is queued (then return to launch it)."""
        while self._unposted:
            if len(self._unposted) >= self.depth or self._unposted[0][0].done():
                self._resolve_oldest()
                continue
            if self._has_queued_jobs():
                return
            time.sleep(POLL_S)  # deliberate: the previous stage or the next step, first

    @property
    def pending(self) -> int:
        """Steps launched whose outcome is not posted yet."""
        return len(self._unposted)

    def flush(self) -> None:
        """Resolve every pending step (before any other job touches the runner)."""
        while self._unposted:
            self._resolve_oldest()

    def _resolve_oldest(self) -> None:
        handle, post = self._unposted.popleft()
        try:
            outcome: Outcome[ModelRunnerOutput] = Outcome(value=handle.result())
        except BaseException as exc:
            outcome = Outcome(error=exc)
        post(outcome)
