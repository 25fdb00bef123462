"""How weights are loaded (``--load-format``); torch-free, so configurations can name it."""

from typing import Literal

# "auto": safetensors files from the model directory (or the .gguf file the model names);
# "dummy": random weights of the right shapes (benchmarks, tests), no files read; "gguf":
# the model is a GGUF file (vLLM's name; "auto" reads one too).
LoadFormat = Literal["auto", "safetensors", "dummy", "gguf"]
