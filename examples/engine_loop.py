"""Your own loop over the engine: vLLM's ``LLMEngine`` API (add_request / step / abort).

python examples/engine_loop.py                 # the embedded demo model
python examples/engine_loop.py /path/to/model

Requests can be added and aborted between steps; each ``step()`` returns what every request
produced since the previous one (here streamed as DELTA pieces).
"""

import sys

from actorllm import LLMEngine, SamplingParams
from actorllm.sampling_params import RequestOutputKind

model = sys.argv[1] if len(sys.argv) > 1 else None  # None: the demo model

engine = LLMEngine(model, max_model_len=512, scheduling_policy="priority")

stream = SamplingParams(temperature=0.0, max_tokens=24, output_kind=RequestOutputKind.DELTA)
engine.add_request("endless", "Count forever: 1, 2, 3,", stream.clone(max_tokens=400), priority=2)
queue = [
    ("story", "Once upon a time,", 1),
    ("code", {"prompt": "def fibonacci(n):"}, 0),  # lower is sooner
]
texts: dict[str, str] = {}
steps = 0
while queue or engine.has_unfinished_requests():
    if queue:  # one new request per step, as a server would receive them
        request_id, prompt, priority = queue.pop(0)
        engine.add_request(request_id, prompt, stream, priority=priority)
    for out in engine.step():
        texts[out.request_id] = texts.get(out.request_id, "") + out.outputs[0].text
        if out.finished:
            print(f"{out.request_id}: {texts[out.request_id]!r}")
    steps += 1
    if steps == 3:
        engine.abort_request("endless")  # it produces nothing more
        print(f"endless (aborted after {steps} steps): {texts.get('endless', '')!r}")

print(f"{steps} steps; unfinished: {engine.get_num_unfinished_requests()}")
