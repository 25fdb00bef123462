import shutil

import pytest

from actorllm.demo import demo_tokenizer_path
from tests.helpers.models import make_tiny_checkpoint


def _tiny_llama(directory, seed: int) -> str:
    """A tiny random Llama (2 layers, hidden 64) with the demo tokenizer beside it."""
    path = make_tiny_checkpoint(
        directory,
        "llama",
        seed=seed,
        vocab_size=4096,
        eos_token_id=0,
        max_position_embeddings=1024,
    )
    for f in demo_tokenizer_path().iterdir():
        shutil.copy(f, path / f.name)
    return str(path)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    """A tiny random Llama (2 layers, hidden 64) with the demo tokenizer beside it."""
    return _tiny_llama(tmp_path_factory.mktemp("tiny-llama"), seed=0)


@pytest.fixture(scope="session")
def other_model(tmp_path_factory) -> str:
    """``tiny_model``'s architecture and tokenizer with other random weights (weight updates)."""
    return _tiny_llama(tmp_path_factory.mktemp("tiny-llama-other"), seed=1)
