"""AsyncEngine embedded in a trio application: the engine runs in the app's own nursery.

python examples/embedded_trio.py
"""

import trio

from actorllm import AsyncEngine, RequestOutputKind, SamplingParams


async def stream(engine: AsyncEngine, name: str, prompt: str) -> None:
    params = SamplingParams(max_tokens=16, output_kind=RequestOutputKind.DELTA, seed=1)
    pieces = []
    async for out in engine.generate(prompt, params, request_id=name):
        pieces.append(out.outputs[0].text)
    print(f"[{name}] {prompt!r} -> {''.join(pieces)!r}")


async def main() -> None:
    async with AsyncEngine.open(max_model_len=512) as engine:  # None: the demo model
        async with trio.open_nursery() as nursery:
            for i, prompt in enumerate(["Hello there", "In a galaxy far away", "import numpy"]):
                nursery.start_soon(stream, engine, f"req-{i}", prompt)
            # The app keeps doing its own work while the engine generates.
            nursery.start_soon(heartbeat)
        stats = await engine.get_stats()
        print(f"steps: {stats.steps_done}, prefix-cache queries: {stats.prefix_cache_queries}")


async def heartbeat() -> None:
    for _ in range(3):
        print("app heartbeat")
        await trio.sleep(0.05)


if __name__ == "__main__":
    trio.run(main)
