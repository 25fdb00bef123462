"""Offline batch inference, written the way vLLM's offline examples are.

python examples/offline_batch.py                 # the embedded demo model
python examples/offline_batch.py /path/to/model  # any local Llama/Mistral/Qwen2/Qwen3

The engine is never closed by hand: the script ends and so does the process.
"""

import sys

from actorllm import LLM, SamplingParams

model = sys.argv[1] if len(sys.argv) > 1 else None  # None: the demo model

prompts = [
    "The capital of France is",
    "def fibonacci(n):",
    {"prompt": "Once upon a time,"},
]
sampling_params = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=24, seed=0)

llm = LLM(model, max_model_len=512)

outputs = llm.generate(prompts, sampling_params)
for output in outputs:
    print(f"Prompt: {output.prompt!r}, Generated text: {output.outputs[0].text!r}")

conversations = [
    [{"role": "user", "content": "Say hello."}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Count to three."}],
]
for reply in llm.chat(conversations, SamplingParams(max_tokens=16)):
    print(f"Chat reply: {reply.outputs[0].text!r}")
