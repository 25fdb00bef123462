"""Structured outputs offline: JSON schema (from a pydantic model), regex, choice, grammar.

python examples/structured_outputs.py                 # the embedded demo model
python examples/structured_outputs.py /path/to/model  # any local model

Even a model that knows nothing (the demo model has random weights) answers in the asked
shape: the constraint masks every token that would break it.
"""

import json
import sys

from pydantic import BaseModel, Field

from actorllm import LLM, SamplingParams
from actorllm.sampling_params import StructuredOutputsParams


class City(BaseModel):
    name: str = Field(max_length=12)
    population: int = Field(ge=0, le=40_000_000)
    capital: bool


model = sys.argv[1] if len(sys.argv) > 1 else None
llm = LLM(model, max_model_len=512)

constraints = {
    "json": StructuredOutputsParams(json=City.model_json_schema(), disable_any_whitespace=True),
    "regex": StructuredOutputsParams(regex=r"[A-Z][a-z]{1,10}, [A-Z]{2}"),
    "choice": StructuredOutputsParams(choice=["positive", "negative", "neutral"]),
    "grammar": StructuredOutputsParams(grammar='root ::= ("yes" | "no") " because " [a-z]{1,12}'),
}
for name, constraint in constraints.items():
    params = SamplingParams(max_tokens=64, temperature=0.0, structured_outputs=constraint)
    text = llm.generate(f"Give me a {name} answer:", params, use_tqdm=False)[0].outputs[0].text
    print(f"{name}: {text}")
    if name == "json":
        city = City.model_validate(json.loads(text))  # always validates
        print(f"  parsed: {city!r}")
