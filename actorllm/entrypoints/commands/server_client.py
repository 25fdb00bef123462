"""What ``actorllm chat`` and ``actorllm complete`` share: a client of a running
OpenAI-compatible server (this one, vLLM's, any), as vLLM's ``vllm chat`` / ``vllm complete``
(``vllm/entrypoints/cli/openai.py``): the same flags, the same output.

The standard library's urllib, not the ``openai`` package: that one is only a test
dependency here, and these commands need two requests and a server-sent-events reader.
A server that refuses (401, 400, ...) or cannot be reached is a :class:`ServerError`,
which the commands print as one ``error:`` line and exit 1 on, never a traceback.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any, final

# As the openai client's default: a long generation can keep a stream quiet for minutes.
TIMEOUT_S = 600.0


class ServerError(Exception):
    """The server answered an error (``status``), or could not be reached (``status`` 0)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"the server answered {status}: {message}" if status else message)
        self.status = status


def add_query_options(parser: argparse.ArgumentParser) -> None:
    """vLLM's ``--url``, ``--model-name``, ``--api-key`` and ``--stats``, with its defaults."""
    parser.add_argument(
        "--url",
        default="http://localhost:8000/v1",
        help="url of the running OpenAI-Compatible RESTful API server",
    )
    parser.add_argument(
        "--model-name",
        default=None,
        help="The model name used in prompt completion, default to the first model in "
        "list models API call.",
    )
    parser.add_argument(
        "--api-key",
        default=None,
        help="API key for the server; overrides $OPENAI_API_KEY (default: EMPTY). It only "
        "applies to the OpenAI-compatible endpoints.",
    )
    parser.add_argument(
        "--stats", action="store_true", help="Print TTFT and TPS statistics after each response."
    )


def add_quick_option(parser: argparse.ArgumentParser, metavar: str, help_text: str) -> None:
    """vLLM's ``-q/--quick``: one message, its answer, exit."""
    parser.add_argument("-q", "--quick", metavar=metavar, default=None, help=help_text)


def run_session(session: Callable[[], None]) -> int:
    """Run a client session: a server error ends it with one ``error:`` line and exit
    status 1; Ctrl-C ends it with 0, as in vLLM."""
    try:
        session()
    except ServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print()
    return 0


def _error_message(body: bytes) -> str:
    """The message of an error body: OpenAI's ``{"error": {"message"}}``, vLLM's 401
    ``{"error": "Unauthorized"}``, or the text as it came."""
    try:
        error = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return body.decode("utf-8", "replace").strip()[:500]
    return str(error.get("message", error) if isinstance(error, dict) else error)


@final
class ServerClient:
    """Blocking requests to ``base_url`` (``http://host:port/v1``) with a bearer key."""

    def __init__(self, base_url: str, api_key: str) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}"}

    def _open(self, path: str, body: dict[str, Any] | None = None) -> Any:
        """The response; raises :class:`ServerError` for an error status or no connection."""
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self._headers)
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.base_url + path, data=data, headers=headers)
        try:
            return urllib.request.urlopen(request, timeout=TIMEOUT_S)
        except urllib.error.HTTPError as exc:
            with exc:
                raise ServerError(exc.code, _error_message(exc.read())) from None
        except urllib.error.URLError as exc:  # wraps the socket's error
            raise ServerError(0, f"cannot reach {self.base_url}: {exc.reason}") from None
        except OSError as exc:
            raise ServerError(0, f"cannot reach {self.base_url}: {exc}") from None

    def first_model(self) -> str:
        with self._open("/models") as response:
            models = json.load(response)["data"]
        if not models:
            raise ServerError(0, f"{self.base_url}/models lists no model")
        return str(models[0]["id"])

    def stream(self, path: str, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """POST ``body`` with ``stream: true``; yields each server-sent event's JSON until
        ``[DONE]``. An error event in the stream raises :class:`ServerError`."""
        with self._open(path, {**body, "stream": True}) as response:
            try:
                for raw in response:  # one line as soon as it arrives
                    line = raw.decode("utf-8").rstrip("\r\n")
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    chunk = json.loads(data)
                    if "error" in chunk:  # OpenAI's error body, its code the HTTP status
                        error, status = chunk["error"], chunk["error"].get("code")
                        status = status if isinstance(status, int) else 500
                        raise ServerError(status, str(error.get("message", error)))
                    yield chunk
            except (OSError, http.client.HTTPException) as exc:
                raise ServerError(0, f"the stream from {self.base_url} broke: {exc!r}") from None


def connect(args: argparse.Namespace) -> tuple[str, ServerClient]:
    """The model to ask (``--model-name``, else the first the server lists) and a client
    with ``--api-key``, else ``$OPENAI_API_KEY``, else ``EMPTY`` (vLLM's precedence)."""
    api_key = args.api_key or os.environ.get("OPENAI_API_KEY", "EMPTY")
    client = ServerClient(args.url, api_key)
    model = args.model_name or client.first_model()
    print(f"Using model: {model}")
    return model, client


def print_stream(chunks: Iterator[dict[str, Any]], stats: bool) -> str:
    """Print the text of a chat or completion stream as it comes (a chat's reasoning between
    ``<think>`` tags, as vLLM does) and return the answer's text (without the reasoning)."""
    output, in_reasoning = "", False
    start, ttft, completion_tokens = time.perf_counter(), None, 0
    for chunk in chunks:
        if chunk.get("usage"):
            completion_tokens = chunk["usage"]["completion_tokens"]
        if not chunk.get("choices"):
            continue
        choice = chunk["choices"][0]
        delta = choice.get("delta") or {}
        text = delta.get("content") if "delta" in choice else choice.get("text")
        reasoning = delta.get("reasoning") or delta.get("reasoning_content")
        if ttft is None and (reasoning or text):
            ttft = time.perf_counter() - start
        if reasoning:
            if not in_reasoning:
                print("<think>", flush=True)
                in_reasoning = True
            print(reasoning, end="", flush=True)
        if text:
            if in_reasoning:
                print("\n</think>", flush=True)
                in_reasoning = False
            output += text
            print(text, end="", flush=True)
    if in_reasoning:
        print("\n</think>", end="", flush=True)
    print()
    if stats:
        print_metrics(start, ttft, completion_tokens)
    return output


def print_metrics(start: float, ttft: float | None, completion_tokens: int) -> None:
    total_time = time.perf_counter() - start
    if ttft is None or total_time <= 0:
        return
    print(f"{'TTFT:':<5} {ttft * 1000:.2f} ms")
    print(
        f"{'TPS:':<5} {completion_tokens / total_time:.2f} tokens/s "
        f"({completion_tokens} tokens in {total_time:.2f}s)"
    )


def read_message() -> str | None:
    """One line from the user after a ``> `` prompt; None at end of input."""
    try:
        return input("> ")
    except EOFError:
        return None
