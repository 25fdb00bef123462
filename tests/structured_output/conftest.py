from __future__ import annotations

import pytest

from actorllm.structured_output import GrammarCompiler
from tests.helpers.tokenizers import ENDOFTEXT_ID, VOCAB_SIZE, hf_demo_tokenizer


@pytest.fixture(scope="module", params=["xgrammar", "guidance"])
def compiler(request: pytest.FixtureRequest) -> GrammarCompiler:
    c = GrammarCompiler(
        hf_demo_tokenizer(),
        vocab_size=VOCAB_SIZE,
        stop_token_ids=[ENDOFTEXT_ID],
        backend=request.param,
        max_workers=1,
    )
    yield c
    c.shutdown()
