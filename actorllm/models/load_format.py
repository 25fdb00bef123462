"""How weights are loaded (``--load-format``); torch-free, so configurations can name it."""

from typing import Literal

# "auto": the model directory's safetensors files, else its PyTorch *.bin, else *.pt (or
# the .gguf file the model names); "safetensors": safetensors only; "pt": the PyTorch
# files only (read with torch.load(weights_only=True)); "dummy": random weights of the
# right shapes (benchmarks, tests), no files read; "gguf": the model is a GGUF file
# (vLLM's name; "auto" reads one too). models/checkpoint_files.py picks the files.
LoadFormat = Literal["auto", "safetensors", "pt", "dummy", "gguf"]
