"""Quantized checkpoints: what ``quantization_config`` asks for (spec.py), the quantized
linears (linear.py) and where the loader puts them (apply.py)."""
