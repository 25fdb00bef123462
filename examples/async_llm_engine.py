"""vLLM's asyncio API, renamed: ``AsyncEngineArgs`` + ``AsyncLLMEngine``.

python examples/async_llm_engine.py                 # the embedded demo model
python examples/async_llm_engine.py /path/to/model

Two requests stream concurrently on the script's own asyncio loop; the engine runs on a
thread of its own. (actorllm's native async API is ``AsyncEngine``: embedded_asyncio.py.)
"""

import asyncio
import sys

from actorllm import AsyncEngineArgs, AsyncLLMEngine, SamplingParams
from actorllm.sampling_params import RequestOutputKind

model = sys.argv[1] if len(sys.argv) > 1 else None  # None: the demo model


async def stream(engine: AsyncLLMEngine, prompt: str, request_id: str) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=16, output_kind=RequestOutputKind.DELTA)
    text = ""
    async for out in engine.generate(prompt, params, request_id=request_id):
        text += out.outputs[0].text
    print(f"{request_id}: {text!r}")


async def main() -> None:
    args = AsyncEngineArgs(model=model, max_model_len=256, disable_log_stats=True)
    engine = AsyncLLMEngine.from_engine_args(args)
    await asyncio.gather(
        stream(engine, "Hello, my name is", "r1"), stream(engine, "The sky is", "r2")
    )
    engine.shutdown()


asyncio.run(main())
