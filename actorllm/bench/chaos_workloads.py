"""The traffic ``actorllm bench chaos`` sends, shaped by its flags: requests spread over
LoRA adapters (``--lora``), prompts as embedding rows (``--prompt-embeds``). Each takes a
workload of :class:`~actorllm.testing.chaos.ChaosRequest` and returns it reshaped, fixed by
its arguments, so the reference run and the soak send the same requests.
"""

from __future__ import annotations

from typing import Any


def lora_workload(workload: list[Any], paths: list[str]) -> list[Any]:
    """``workload`` with request i on adapter i mod (N+1) (N: the base model)."""
    import dataclasses

    from actorllm.core.lora import LoRARequest

    adapters = [LoRARequest(f"lora{i}", i + 1, p) for i, p in enumerate(paths)]
    choice = [*adapters, None]
    return [
        dataclasses.replace(r, lora_request=choice[i % len(choice)]) for i, r in enumerate(workload)
    ]


def embeds_width(model: str | None) -> int:
    """The hidden size an embedding prompt needs: the scripted model's, or the model's."""
    if model is None:
        from actorllm.testing.scripted_model import ScriptedModel

        return ScriptedModel.EMBEDS_HIDDEN_SIZE
    from actorllm.models.config import CheckpointConfig

    return CheckpointConfig.from_pretrained(model).hidden_size


def embeds_workload(workload: list[Any], hidden: int, seed: int) -> list[Any]:
    """``workload`` with every other request's prompt as 4-23 random embedding rows, every
    fourth of those a mixed prompt (3 tokens, the rows, 3 tokens: a chat's ``prompt_embeds``
    parts), fixed by ``seed``: the reference run and the soak send the same tensors."""
    import dataclasses

    import torch

    gen = torch.Generator().manual_seed(seed)
    out = []
    for i, r in enumerate(workload):
        n = 4 + i % 20
        if i % 8 == 7:
            ids = [1 + (7 * i + 3 * k) % 90 for k in range(n + 6)]
            rows = torch.zeros(n + 6, hidden)  # [T, H]; the token positions' rows unused
            rows[3 : n + 3] = torch.randn(n, hidden, generator=gen) * 0.05
            mask = [k < 3 or k >= n + 3 for k in range(n + 6)]
            prompt = {"prompt_embeds": rows, "prompt_token_ids": ids, "prompt_is_token_ids": mask}
            r = dataclasses.replace(r, prompt=prompt)
        elif i % 2:
            rows = torch.randn(n, hidden, generator=gen) * 0.05  # [T, H]
            r = dataclasses.replace(r, prompt={"prompt_embeds": rows})
        out.append(r)
    return out
