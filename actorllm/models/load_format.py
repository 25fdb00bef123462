"""How weights are loaded (``--load-format``); torch-free, so configurations can name it."""

from typing import Literal

# "auto": safetensors files from the model directory; "dummy": random weights of the
# right shapes (benchmarks, tests), no files read.
LoadFormat = Literal["auto", "safetensors", "dummy"]
