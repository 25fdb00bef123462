"""Every way a script can end leaves no engine behind: each path runs in a subprocess with a
time limit, for ``LLM`` and for ``LLMEngine``.

The scripts print ``END`` after their last line of work; the process must be gone soon
after (a hang at interpreter shutdown is what this guards against). Scripts that close the
engine themselves then check that no engine thread and no child process is left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from actorllm import LLM, SamplingParams
from actorllm.engine.config.engine_config import ModelNotFoundError
from actorllm.engine.errors import EngineClosedError

ROOT = Path(__file__).resolve().parents[2]

# Longest a healthy run may take: start-up on a loaded machine plus the work.
RUN_LIMIT_S = 180.0
# Longest from the last line of a script to the end of its process.
EXIT_LIMIT_S = 20.0

PRELUDE = """\
import os, sys, threading
from actorllm import LLM, LLMEngine, SamplingParams

MODEL = sys.argv[1]
SMALL = dict(max_model_len=1024, kv_cache_memory_bytes=16 * 2**20)

def leftovers():
    threads = [
        t.name for t in threading.enumerate()
        if t is not threading.main_thread() and (not t.daemon or t.name.startswith("actorllm"))
    ]
    me = str(os.getpid())
    kids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[1] == me:
                    kids.append(pid)
        except OSError:
            pass
    return threads, kids

def use(engine):
    if isinstance(engine, LLM):
        return engine.generate("hello", SamplingParams(max_tokens=2), use_tqdm=False)
    engine.add_request("r", "hello", SamplingParams(max_tokens=2))
    while engine.has_unfinished_requests():
        engine.step()
"""

# {exit path: script body}; FACADE is LLM or LLMEngine.
BODIES = {
    "module_level": """
        engine = FACADE(MODEL, **SMALL)
        use(engine)
        print("END", flush=True)
    """,
    "del": """
        engine = FACADE(MODEL, **SMALL)
        use(engine)
        del engine
        print("LEFT", leftovers(), flush=True)
        print("END", flush=True)
    """,
    "with": """
        with FACADE(MODEL, **SMALL) as engine:
            use(engine)
        print("LEFT", leftovers(), flush=True)
        print("END", flush=True)
    """,
    "exception": """
        engine = FACADE(MODEL, **SMALL)
        use(engine)
        print("END", flush=True)
        raise RuntimeError("the script failed")
    """,
}

LONG_RUN = """
    import atexit, signal, time

    # Python's own SIGINT handler (installed explicitly: a parent started in the background
    # may pass SIGINT on ignored), with a time stamp; the atexit hook runs after the engine's
    # exit hook, so it sees how long stopping the run and the engine took.
    interrupted = []

    def stamp(signum, frame):
        interrupted.append(time.monotonic())
        signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, stamp)
    atexit.register(
        lambda: print(f"STOPPED {time.monotonic() - interrupted[0]:.3f}", file=sys.stderr)
    )
    engine = FACADE(MODEL, **SMALL)
    use(engine)
    long = SamplingParams(max_tokens=1000, ignore_eos=True)
    prompts = [f"prompt number {i}" for i in range(16)]
    print("GENERATING", flush=True)
    if isinstance(engine, LLM):
        engine.generate(prompts, long, use_tqdm=False)
    else:
        for i, p in enumerate(prompts):
            engine.add_request(str(i), p, long)
        while engine.has_unfinished_requests():
            engine.step()
    print("FINISHED", flush=True)
"""


def _script(body: str, facade: str) -> str:
    return PRELUDE + f"FACADE = {facade}\n" + textwrap.dedent(body)


def _start(tmp_path: Path, body: str, facade: str, model: str) -> subprocess.Popen[str]:
    path = tmp_path / "script.py"
    path.write_text(_script(body, facade))
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.Popen(
        [sys.executable, str(path), model],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )


def _wait_for_line(proc: subprocess.Popen[str], marker: str) -> list[str]:
    """Lines of stdout up to and including the one starting with ``marker``."""
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + RUN_LIMIT_S
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith(marker):
            return lines
    proc.kill()
    _, err = proc.communicate()
    pytest.fail(f"no {marker!r} line; stdout={lines!r}\nstderr={err[-3000:]}")


def _finish(proc: subprocess.Popen[str], limit: float) -> tuple[float, str, str]:
    start = time.monotonic()
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the process did not exit within {limit} s\nstderr={err[-3000:]}")
    return time.monotonic() - start, out, err


@pytest.mark.timeout(2 * RUN_LIMIT_S)
@pytest.mark.parametrize("facade", ["LLM", "LLMEngine"])
@pytest.mark.parametrize("path", list(BODIES))
def test_the_process_ends_soon_after_its_last_line(tmp_path, tiny_model, facade, path):
    proc = _start(tmp_path, BODIES[path], facade, tiny_model)
    lines = _wait_for_line(proc, "END")
    _, _, err = _finish(proc, EXIT_LIMIT_S)
    if path == "exception":
        assert proc.returncode == 1
        assert "RuntimeError: the script failed" in err
    else:
        assert proc.returncode == 0, err[-3000:]
    left = [line for line in lines if line.startswith("LEFT")]
    if left:
        assert left[0].strip() == "LEFT ([], [])"


@pytest.mark.timeout(2 * RUN_LIMIT_S)
@pytest.mark.parametrize("facade", ["LLM", "LLMEngine"])
def test_ctrl_c_during_a_long_run_stops_it_and_exits(tmp_path, tiny_model, facade):
    proc = _start(tmp_path, LONG_RUN, facade, tiny_model)
    _wait_for_line(proc, "GENERATING")
    time.sleep(1.0)  # well inside the run (16 requests of 1000 tokens)
    proc.send_signal(signal.SIGINT)
    took, out, err = _finish(proc, EXIT_LIMIT_S)
    assert "FINISHED" not in out
    assert "Traceback" in err and "KeyboardInterrupt" in err
    # An unhandled KeyboardInterrupt ends Python by SIGINT, as usual.
    assert proc.returncode == -signal.SIGINT
    # The run was aborted and the engine and its threads stopped within 2 s of Ctrl-C (what
    # follows is the interpreter unloading torch, which depends on the machine's load).
    (stopped,) = [float(x.split()[1]) for x in err.splitlines() if x.startswith("STOPPED")]
    assert stopped < 2.0
    print(f"{facade}: engine stopped {stopped:.3f} s, process ended {took:.2f} s after SIGINT")


def _engine_threads(before: set[threading.Thread]) -> list[str]:
    return [t.name for t in threading.enumerate() if t not in before and t.is_alive()]


def test_close_from_another_thread_ends_a_running_call(tiny_model):
    before = set(threading.enumerate())
    llm = LLM(tiny_model, backend="asyncio", max_model_len=1024, kv_cache_memory_bytes=2**24)
    assert llm.generate("hi", SamplingParams(max_tokens=2), use_tqdm=False)[0].finished
    closer = threading.Timer(0.5, llm.close)
    closer.start()
    with pytest.raises(EngineClosedError):
        llm.generate(["a", "b"], SamplingParams(max_tokens=1000, ignore_eos=True), use_tqdm=False)
    closer.join()
    with pytest.raises(EngineClosedError):
        llm.generate("hi", use_tqdm=False)
    llm.close()  # idempotent
    assert [n for n in _engine_threads(before) if n.startswith("actorllm")] == []


def test_a_failed_start_raises_and_leaves_no_thread(tmp_path):
    before = set(threading.enumerate())
    with pytest.raises(ModelNotFoundError):
        LLM(str(tmp_path / "no-such-model"))
    assert [n for n in _engine_threads(before) if n.startswith("actorllm")] == []
