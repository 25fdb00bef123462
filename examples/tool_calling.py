"""Tool calling offline: the tools reach the chat template, structured outputs force a
call whose arguments validate against the function's parameters, and the tool's result
goes back into the conversation.

python examples/tool_calling.py                 # the embedded demo model
python examples/tool_calling.py /path/to/model  # any local model

A model whose template renders tools (Qwen2.5, Hermes, Llama 3.1...) uses its own; the
demo model's does not, so it gets a small Hermes-style one.
"""

import json
import sys

import jsonschema

from actorllm import LLM, SamplingParams
from actorllm.entrypoints.openai.tool_parsers import tool_choice_schema
from actorllm.sampling_params import StructuredOutputsParams

TEMPLATE = (
    "{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    '{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>{"name": '
    '{{ c.function.name | tojson }}, "arguments": {{ c.function.arguments | tojson }}}'
    "</tool_call>{% endfor %}{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}

model = sys.argv[1] if len(sys.argv) > 1 else None
llm = LLM(model, max_model_len=512)
# The model's own template if it renders tools, else the small one above.
template = None if "tools" in (llm.get_tokenizer().chat_template or "") else TEMPLATE
messages = [{"role": "user", "content": "What is the weather in Paris for 3 days?"}]

# tool_choice {"type": "function", "function": {"name": "get_weather"}}: the reply is the
# call's arguments, forced by the function's parameters schema.
named = {"type": "function", "function": {"name": "get_weather"}}
schema = tool_choice_schema([WEATHER], named)
params = SamplingParams(
    max_tokens=64,
    temperature=0.0,
    structured_outputs=StructuredOutputsParams(json=schema, disable_any_whitespace=True),
)
out = llm.chat(messages, params, tools=[WEATHER], chat_template=template, use_tqdm=False)
arguments = out[0].outputs[0].text
jsonschema.validate(json.loads(arguments), schema)  # always validates
print(f"call: get_weather({arguments})")

# The call and its result go back to the model, which answers in plain text.
messages += [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": arguments}},
    ]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
]  # fmt: skip
reply = llm.chat(
    messages, SamplingParams(max_tokens=16), tools=[WEATHER], chat_template=template,
    use_tqdm=False,
)  # fmt: skip
print(f"prompt ends: {reply[0].prompt[-60:]!r}")
