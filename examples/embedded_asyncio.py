"""AsyncEngine embedded in an asyncio application (the same engine, the other backend).

python examples/embedded_asyncio.py
"""

import asyncio

from actorllm import AsyncEngine, SamplingParams


async def complete(engine: AsyncEngine, prompt: str) -> str:
    final = None
    async for out in engine.generate(prompt, SamplingParams(max_tokens=12, temperature=0.0)):
        final = out
    assert final is not None
    return final.outputs[0].text


async def main() -> None:
    async with AsyncEngine.open(max_model_len=512) as engine:
        texts = await asyncio.gather(*(complete(engine, p) for p in ["alpha", "beta", "gamma"]))
        for prompt, text in zip(["alpha", "beta", "gamma"], texts, strict=True):
            print(f"{prompt!r} -> {text!r}")
        # Cancelling a task aborts its request and frees its KV blocks.
        task = asyncio.create_task(complete(engine, "this one is cancelled"))
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        print("running after cancel:", (await engine.get_stats()).num_running_reqs)


if __name__ == "__main__":
    asyncio.run(main())
