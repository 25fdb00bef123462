"""Shared test helpers: tiny HF checkpoints, tokenizers, a hand-driven scheduler."""
