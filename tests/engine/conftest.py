import shutil

import pytest

from actorllm.demo import demo_tokenizer_path
from tests.helpers.models import make_tiny_checkpoint


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    """A tiny random Llama (2 layers, hidden 64) with the demo tokenizer beside it."""
    path = make_tiny_checkpoint(
        tmp_path_factory.mktemp("tiny-llama"),
        "llama",
        vocab_size=4096,
        eos_token_id=0,
        max_position_embeddings=1024,
    )
    for f in demo_tokenizer_path().iterdir():
        shutil.copy(f, path / f.name)
    return str(path)
