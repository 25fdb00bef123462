"""``actorllm run-batch -i batch.jsonl -o out.jsonl``: OpenAI's batch file format, offline.

vLLM's ``run-batch`` command line: ``-i/--input-file`` and ``-o/--output-file`` (a path,
``file://`` URL or ``-`` for stdin / stdout), ``--output-tmp-dir``, the frontend flags that
shape responses (``--response-role``, tool calling, chat template kwargs, ...) and every
engine flag of ``serve``. Each line runs through the server's own handlers on one engine
(:mod:`actorllm.entrypoints.openai.run_batch`), all lines concurrently, with a progress bar
on stderr; the output is written in input order, one ``BatchRequestOutput`` a line.

    $ actorllm run-batch -i batch.jsonl -o results.jsonl --model Qwen/Qwen3-0.6B
    $ cat batch.jsonl | actorllm run-batch -i - -o - > results.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

import anyio

from actorllm.compat.vllm import foreign_flags, logging_flags
from actorllm.compat.vllm.config_file import add_config_argument
from actorllm.compat.vllm.foreign_flags import Foreign
from actorllm.compat.vllm.struct_flags import Groups, add_struct_flags, given
from actorllm.entrypoints.commands.engine_args import (
    add_engine_arguments,
    describe_error,
    engine_config,
)
from actorllm.entrypoints.commands.serve import add_log_spellings
from actorllm.entrypoints.openai.app.settings import AppSettings

if TYPE_CHECKING:
    from actorllm.engine.config.engine_config import EngineConfig
    from actorllm.entrypoints.openai.run_batch import BatchSummary

HELP = "run a file of OpenAI batch requests (JSONL) and write the responses (JSONL)"
logger = logging.getLogger("actorllm.batch")

# AppSettings fields that only an HTTP listener has: no flags here (vLLM's run-batch has
# none of them either; its metrics endpoint has flags of its own, below).
_HTTP_ONLY = frozenset(
    {
        *AppSettings.CLI_EXCLUDE,
        "api_key",
        "max_body_bytes",
        "dev_mode",
        "root_path",
        "allowed_origins",
        "allowed_methods",
        "allowed_headers",
        "allow_credentials",
        "middleware",
        "enable_server_load_tracking",
        "enable_tokenizer_info_endpoint",
    }
)
_NO_ENDPOINT = "run-batch has no HTTP endpoints; the progress bar and stats log show progress"
# vLLM's run-batch flags for endpoints it lacks: accepted with a warning naming them.
_BATCH_FOREIGN = [
    Foreign(("--enable-server-load-tracking",), "ignore", _NO_ENDPOINT, nargs=0),
    Foreign(("--enable-tokenizer-info-endpoint",), "ignore", _NO_ENDPOINT, nargs=0),
]
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    files = parser.add_argument_group("Batch files")
    files.add_argument(
        "-i",
        "--input-file",
        required=True,
        metavar="PATH",
        help="the OpenAI batch file (JSONL): a path, a file:// URL, or - for stdin",
    )
    files.add_argument(
        "-o",
        "--output-file",
        required=True,
        metavar="PATH",
        help="where the responses go (JSONL, in input order): a path, a file:// URL, or - "
        "for stdout",
    )
    files.add_argument(
        "--output-tmp-dir",
        default=None,
        metavar="DIR",
        help="where the output is written until the batch is done, then moved to "
        "--output-file (default: beside it), so a failed run leaves no half file",
    )
    metrics = parser.add_argument_group("Metrics")
    metrics.add_argument(
        "--enable-metrics",
        action="store_true",
        help="serve the Prometheus metrics during the run (every GET path answers them, as "
        "vLLM's run-batch; refreshed every second) on --host:--port",
    )
    metrics.add_argument(
        "--host", default=None, help="the metrics endpoint's address (default 0.0.0.0)"
    )
    metrics.add_argument(
        "--url", default=None, help="vLLM's deprecated spelling of --host (--host wins)"
    )
    metrics.add_argument(
        "--port", type=int, default=8000, help="the metrics endpoint's port (default 8000)"
    )
    groups: Groups = {}
    add_struct_flags(parser, AppSettings, groups=groups, exclude=_HTTP_ONLY)
    frontend = groups["Frontend"]
    add_log_spellings(frontend)
    logging_flags.add_logging_flags(frontend)
    add_engine_arguments(parser, model_positional=False)
    add_config_argument(frontend)
    foreign_flags.add_foreign_flags(parser, extra=_BATCH_FOREIGN)


def local_path(given_path: str, flag: str) -> str:
    """A path, ``-``, or the path of a ``file://`` URL; other URLs are refused by name
    (nothing is fetched or uploaded: download the file first)."""
    if not _SCHEME.match(given_path):
        return given_path
    url = urlparse(given_path)
    if url.scheme != "file":
        raise ValueError(
            f"{flag} {given_path}: {url.scheme}:// URLs are not supported (run-batch reads "
            "and writes local files only); pass a path, a file:// URL or -."
        )
    return unquote(url.path)


def run(args: argparse.Namespace) -> int:
    try:
        settings = AppSettings(**given(args, AppSettings, _HTTP_ONLY))
        config = engine_config(args)
        notes = foreign_flags.notes(args)
        source = local_path(args.input_file, "--input-file")
        target = local_path(args.output_file, "--output-file")
        logging_flags.apply_log_config_file(args)
    except ValueError as exc:
        logger.error("invalid configuration: %s", describe_error(exc))
        return 2
    for note in notes:
        logger.warning("%s", note)
    try:  # read before the model loads: a wrong path fails in a second, not a minute
        lines = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        logger.error("cannot read --input-file %s: %s", args.input_file, exc)
        return 2
    try:
        with output_writer(target, args.output_tmp_dir) as write:
            summary = anyio.run(
                _batch,
                config,
                settings,
                lines.splitlines(),
                write,
                metrics_at(args),
                backend="trio",
            )
    except OSError as exc:
        logger.error("cannot write --output-file %s: %s", args.output_file, exc)
        return 2
    except Exception as exc:  # the engine failed to start, or died: one line, as serve
        logger.error("run-batch stopped: %s", describe_error(exc))
        return 1
    logger.info(
        "run-batch: %d requests, %d failed; responses in %s",
        summary.lines,
        summary.failed,
        "stdout" if target == "-" else target,
    )
    return 0


def metrics_at(args: argparse.Namespace) -> tuple[str, int] | None:
    """Where ``--enable-metrics`` serves (vLLM's: ``--host``, else ``--url``, else all
    interfaces; ``--port``), or None without it."""
    if not args.enable_metrics:
        return None
    return (args.host or args.url or "0.0.0.0", args.port)


async def _batch(
    config: EngineConfig,
    settings: AppSettings,
    lines: list[bytes],
    write: Callable[[bytes], object],
    metrics: tuple[str, int] | None = None,
) -> BatchSummary:
    from tqdm import tqdm

    from actorllm.engine import AsyncEngine
    from actorllm.engine.api.stats_logger import log_stats_forever
    from actorllm.engine.metrics.endpoint import MetricsEndpoint
    from actorllm.entrypoints.openai.app.lifespan import serving_context
    from actorllm.entrypoints.openai.run_batch import run_batch

    total = sum(1 for line in lines if line.strip())
    async with AsyncEngine.open(config) as engine, anyio.create_task_group() as tg:
        ctx = serving_context(engine, settings)
        if settings.log_interval_s > 0:
            tg.start_soon(log_stats_forever, engine, settings.log_interval_s)
        if metrics is not None:
            endpoint = MetricsEndpoint(ctx.metrics, *metrics)
            logger.info("Prometheus metrics on %s", endpoint.url)
            tg.start_soon(endpoint.refresh_forever, engine)
        with tqdm(total=total, desc="Running batch", unit="req", file=sys.stderr) as bar:
            summary = await run_batch(
                ctx,
                lines,
                write,
                limit=line_limit(config),
                on_done=bar.update,
                log_requests=settings.enable_log_requests,
            )
        tg.cancel_scope.cancel()
    return summary


def line_limit(config: EngineConfig) -> int:
    """Lines in flight at once. vLLM's bound, twice what the schedulers run, keeps them full
    while the file's other lines wait here, not in the engine's queue; with
    ``--max-waiting-requests``, no more than the engine admits (a line of several prompts
    can still be refused, and is retried)."""
    running = config.max_num_seqs * config.data_parallel_size
    limit = 2 * running
    if config.max_waiting_requests is not None:
        limit = min(limit, running + config.max_waiting_requests)
    return limit


@contextlib.contextmanager
def output_writer(target: str, tmp_dir: str | None) -> Iterator[Callable[[bytes], object]]:
    """A writer of output lines: stdout line by line, or a temporary file moved to
    ``target`` once the batch is done (removed if it fails)."""
    if target == "-":
        out = sys.stdout.buffer

        def write_stdout(data: bytes) -> None:
            out.write(data)
            out.flush()  # a reader of the pipe sees each line as its turn comes

        yield write_stdout
        return
    directory = tmp_dir or os.path.dirname(os.path.abspath(target))
    fd, tmp = tempfile.mkstemp(prefix="tmp_batch_output_", suffix=".jsonl", dir=directory)
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # mkstemp's 0600 would stay on the moved file
        with os.fdopen(fd, "wb") as f:
            yield f.write
        shutil.move(tmp, target)  # os.replace, or a copy when --output-tmp-dir is elsewhere
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
