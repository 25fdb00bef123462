"""materialize (models/materialize.py): a meta-built model gets storage on the device
with every parameter's and buffer's size, stride, dtype and requires_grad, and tied
tensors untied (the model's ``tie_weights`` ties them again): what ``to_empty`` gives in
all but the values."""

from __future__ import annotations

import torch
from torch import nn

from actorllm.models.materialize import materialize


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.proj = nn.Linear(4, 6, bias=True)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight  # tied
        self.frozen = nn.Parameter(torch.empty(3, 5, dtype=torch.int8), requires_grad=False)
        self.register_buffer("cache", torch.empty(5, 2).t())  # [2, 5], a transposed stride
        self.register_buffer("none", None)


def _meta() -> _Tiny:
    with torch.device("meta"):
        return _Tiny().to(torch.bfloat16)


def test_materialize_matches_to_empty_but_the_values() -> None:
    model, reference = materialize(_meta(), "cpu"), _meta().to_empty(device="cpu")
    got, want = dict(model.named_parameters()), dict(reference.named_parameters())
    assert got.keys() == want.keys()
    for name, p in got.items():
        q = want[name]
        assert isinstance(p, nn.Parameter), name
        assert (p.device, p.shape, p.stride(), p.dtype) == (q.device, q.shape, q.stride(), q.dtype)
        assert p.requires_grad == q.requires_grad, name
    assert model.frozen.dtype == torch.int8 and not model.frozen.requires_grad
    assert model.head.weight is not model.embed.weight  # as to_empty: untied
    assert model.cache.device.type == "cpu" and model.cache.stride() == (1, 2)
    assert model.none is None
    assert not any(t.is_meta for t in [*model.parameters(), *model.buffers()])
