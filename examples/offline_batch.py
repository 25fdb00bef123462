"""Offline batch inference with the synchronous LLM facade (vLLM's offline API).

python examples/offline_batch.py                 # the embedded demo model
python examples/offline_batch.py /path/to/model  # any local Llama/Mistral/Qwen2/Qwen3
"""

import sys

from actorllm.core.sampling_params import SamplingParams
from actorllm.engine import LLM


def main() -> None:
    model = sys.argv[1] if len(sys.argv) > 1 else None
    prompts = [
        "The capital of France is",
        "def fibonacci(n):",
        "Once upon a time,",
    ]
    with LLM(model, max_model_len=512) as llm:
        outputs = llm.generate(
            prompts, SamplingParams(temperature=0.8, top_p=0.95, max_tokens=24, seed=0)
        )
        for out in outputs:
            print(f"{out.prompt!r} -> {out.outputs[0].text!r}")
        (reply,) = llm.chat(
            [{"role": "user", "content": "Say hello."}], SamplingParams(max_tokens=16)
        )
        print("chat ->", repr(reply.outputs[0].text))


if __name__ == "__main__":
    main()
