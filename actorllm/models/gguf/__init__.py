"""GGUF files (llama.cpp): metadata -> config (config.py), blocks -> packed layouts
(blocks.py), the quantized linear (linear.py) and the loader (load.py)."""
