"""``actorllm generate --interactive``: a chat with a local engine in the terminal, replies
streamed as they come.

Reads lines from stdin (``/exit`` or end of input quits, ``/reset`` forgets the history);
the engine keeps running between turns, so later turns reuse the cached prefix. (``actorllm
chat`` is vLLM's ``vllm chat``: a client of a running server, ``commands/chat.py``.)
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from actorllm.core.sampling_params import SamplingParams
    from actorllm.engine import AsyncEngine


def _read_line(prompt: str) -> str | None:
    try:
        return input(prompt)
    except EOFError:
        return None


async def chat_loop(
    engine: AsyncEngine, params: SamplingParams, system: str | None, interactive: bool
) -> None:
    """Until ``/exit`` or end of input. ``interactive``: show a ``> `` prompt (a terminal);
    piped input gets none, so the output is the replies only."""
    history: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
    while True:
        line = await anyio.to_thread.run_sync(_read_line, "> " if interactive else "")
        if line is None or line.strip() == "/exit":
            return
        if line.strip() == "/reset":
            del history[1 if system else 0 :]
            continue
        if not line.strip():
            continue
        history.append({"role": "user", "content": line})
        reply = []
        try:
            async for out in engine.chat(history, params):
                for co in out.outputs:
                    reply.append(co.text)
                    sys.stdout.write(co.text)
                    sys.stdout.flush()
        except ValueError as exc:  # e.g. the conversation outgrew max_model_len
            print(f"\nerror: {exc} (try /reset)", file=sys.stderr)
            history.pop()
            continue
        sys.stdout.write("\n")
        history.append({"role": "assistant", "content": "".join(reply)})
