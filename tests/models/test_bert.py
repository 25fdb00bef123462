"""The encoder's packed forward against transformers' own, one sequence at a time.

A step mixes long sequences (attended alone, on views of the packed rows) with short ones
(padded together under a key mask): every mix must give each sequence the hidden states
transformers gives it alone.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from actorllm.models.bert import ALONE_MIN_LEN, EncoderModel, load_encoder
from actorllm.models.encoder_config import read_encoder_config
from actorllm.models.onednn_linear import prepack_linears
from tests.helpers.models import to_pytorch_bin

L = ALONE_MIN_LEN


@pytest.fixture(scope="module", params=["bert", "roberta"])
def tiny(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    import transformers

    path = tmp_path_factory.mktemp(request.param)
    common = {
        "vocab_size": 97,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "max_position_embeddings": 2 * L + 8,
    }
    torch.manual_seed(0)
    if request.param == "bert":
        transformers.BertModel(transformers.BertConfig(**common)).save_pretrained(path)
    else:
        cfg = transformers.RobertaConfig(**common, pad_token_id=1)
        transformers.RobertaModel(cfg).save_pretrained(path)
    return path


def _ours(path: Path, packed: bool = False) -> EncoderModel:
    model = load_encoder(path, read_encoder_config(path), torch.float32, torch.device("cpu"))
    if packed:  # what the runner does: oneDNN linears, fused activation / residual / QKV
        prepack_linears(model)
    return model


@pytest.mark.parametrize(
    "lens",
    [
        [5],  # one short sequence
        [L + 3],  # one long sequence
        [7, 7, 7],  # short ones of equal length
        [3, L + 9, 11, L, 1, 2 * L],  # long and short interleaved, uneven
        [L - 1, L, L + 1],  # either side of the threshold
    ],
)
@pytest.mark.parametrize("packed", [False, True])
def test_each_sequence_gets_what_transformers_gives_it_alone(
    tiny: Path, lens: list[int], packed: bool
) -> None:
    import transformers

    hf = transformers.AutoModel.from_pretrained(tiny).eval()
    ours = _ours(tiny, packed)
    g = torch.Generator().manual_seed(sum(lens))
    seqs = [torch.randint(3, 97, (n,), generator=g) for n in lens]
    types = [torch.randint(0, 2, (n,), generator=g) for n in lens]
    with torch.inference_mode():
        got = ours(torch.cat(seqs), torch.cat(types), lens)  # [T, H]
        want = torch.cat(
            [
                hf(input_ids=s[None], token_type_ids=t[None]).last_hidden_state[0]
                for s, t in zip(seqs, types, strict=True)
            ]
        )
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


def test_a_sequence_gets_the_same_bits_in_any_step(tiny: Path) -> None:
    """A request replayed after a crash runs beside other requests than the first time; its
    rows must come out bit for bit as they did: the short ones are always padded to the
    same width, whatever their partners, and the CPU runner's oneDNN linears give a row the
    same bits at any row count (torch's own matmul, unpacked, does not: the GPU's path)."""
    ours = _ours(tiny, packed=True)
    g = torch.Generator().manual_seed(0)
    lens = [9, 3, 40, L + 5, 17, 1]
    seqs = [torch.randint(3, 97, (n,), generator=g) for n in lens]
    types = [torch.zeros(n, dtype=torch.long) for n in lens]
    with torch.inference_mode():
        together = ours(torch.cat(seqs), torch.cat(types), lens).split(lens)  # [n, H] each
        for i, n in enumerate(lens):
            alone = ours(seqs[i], types[i], [n])  # [n, H]
            assert torch.equal(alone, together[i]), f"sequence {i} ({n} tokens) changed"


def test_a_bin_save_loads_the_same_encoder(tiny: Path, tmp_path: Path) -> None:
    shutil.copytree(tiny, tmp_path / "pt")
    to_pytorch_bin(tmp_path / "pt")
    assert (tmp_path / "pt" / "pytorch_model.bin").is_file()
    a, b = _ours(tiny).state_dict(), _ours(tmp_path / "pt").state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
