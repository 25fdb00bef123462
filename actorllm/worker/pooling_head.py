"""The runner side of pooling: turn one step's hidden rows into pooled results.

Shared by the encoder runner (whole sequences in one step) and the decoder model runner
(``--runner pooling --convert embed|classify``: a prompt may arrive in chunks; the rows of
a request's earlier chunks are kept here until its last chunk runs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from actorllm.core.pooling_params import TOKEN_TASKS, PooledData, PoolingParams
from actorllm.models.pooler import finish_classification, finish_embedding, pool_rows
from actorllm.models.pooler_spec import PoolerSpec

# Classifier over pooled rows: [N, H] -> [N, num_labels]; None: the model has none.
Classifier = Callable[[torch.Tensor], torch.Tensor] | None


def step_select(
    logits: torch.Tensor, prompt_ids: Sequence[int] | None, p: PoolingParams
) -> torch.Tensor:
    """vLLM's STEP pooling of one prompt's per-token logits [n, L]: the
    ``returned_token_ids`` columns, then the rows whose prompt token is ``step_tag_id``
    -> [steps, len(returned_token_ids) or L]. Unset parameters keep everything."""
    if p.returned_token_ids:
        logits = logits[:, p.returned_token_ids]
    if p.step_tag_id is not None:
        assert prompt_ids is not None
        # The rows are the prompt's last n positions (all of them unless a prefix-cache
        # hit skipped some, which a request may ask for with skip_reading_prefix_cache).
        tail = list(prompt_ids)[len(prompt_ids) - logits.shape[0] :]
        rows = [i for i, t in enumerate(tail) if t == p.step_tag_id]
        logits = logits[torch.tensor(rows, dtype=torch.long, device=logits.device)]
    return logits


def to_pooled(t: torch.Tensor) -> PooledData:
    """A result tensor -> the core's PooledData (float32, little-endian). Host copy: the
    step's result goes to the host anyway (deliberate sync)."""
    arr = t.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy()
    return PooledData(data=arr.astype("<f4", copy=False).tobytes(), shape=list(arr.shape))


@dataclass
class PoolingHead:
    """Pools finished sequences; holds the rows of prompts still arriving in chunks."""

    spec: PoolerSpec
    classifier: Classifier
    # token_classify: the classification head on each token's row [n, H] -> [n, L] (a
    # decoder's score head; an encoder's head without BERT's CLS pooler, as vLLM's)
    token_classifier: Classifier = None
    # {req_id: rows of its earlier chunks [n, H]} (decoders with chunked prefill only)
    partial: dict[str, list[torch.Tensor]] = field(default_factory=dict)

    def forget(self, req_id: str) -> None:
        self.partial.pop(req_id, None)

    def reset(self) -> None:
        self.partial.clear()

    def add_chunk(self, req_id: str, rows: torch.Tensor, task: str | None = None) -> None:
        """A non-final chunk's rows [n, H] of a request for ``task``, keeping only what
        its result will read: every row for a per-token task (token_embed, token_classify:
        a row per token, whatever the pooling type) and for MEAN pooling, the first for
        CLS, none for LAST."""
        ptype = self.spec.pooling_type
        kept = self.partial.setdefault(req_id, [])
        if ptype == "MEAN" or task in TOKEN_TASKS:
            kept.append(rows)
        elif ptype == "CLS" and not kept:
            kept.append(rows[:1])

    def pool(
        self,
        hidden: torch.Tensor,
        req_ids: list[str],
        starts: list[int],
        lens: list[int],
        params: list[PoolingParams],
        prompt_ids: Sequence[Sequence[int] | None] | None = None,
    ) -> dict[str, PooledData]:
        """Results for sequences whose last rows are ``hidden[starts[i] : starts[i] +
        lens[i]]`` (earlier chunks' rows, if any, come from :meth:`add_chunk`).
        ``prompt_ids[i]``: sequence i's whole prompt, needed where its params set
        ``step_tag_id`` (STEP pooling), else None."""
        if any(r in self.partial for r in req_ids):
            hidden, starts, lens = self._join_partial(hidden, req_ids, starts, lens)
        out: dict[str, PooledData] = {}
        seq = [i for i, p in enumerate(params) if p.task not in TOKEN_TASKS]
        if seq:
            pooled = pool_rows(
                hidden, [starts[i] for i in seq], [lens[i] for i in seq], self.spec.pooling_type
            )  # [N, H]
            logits = None
            if any(params[i].task == "classify" for i in seq):
                if self.classifier is None:
                    raise ValueError("classify on a model without a classifier")
                logits = self.classifier(pooled.to(hidden.dtype))  # [N, L]
            for j, i in enumerate(seq):
                p = params[i]
                if p.task == "classify":
                    assert logits is not None
                    res = finish_classification(logits[j], self.spec, p.use_activation)
                else:
                    res = finish_embedding(pooled[j], self.spec, p.use_activation, p.dimensions)
                out[req_ids[i]] = to_pooled(res)
        for i, p in enumerate(params):
            if p.task in TOKEN_TASKS:
                rows = hidden[starts[i] : starts[i] + lens[i]]  # [n, H]
                ids = prompt_ids[i] if prompt_ids is not None else None
                out[req_ids[i]] = to_pooled(self._per_token(rows, p, ids))
        for r in req_ids:
            self.partial.pop(r, None)
        return out

    def _per_token(
        self, rows: torch.Tensor, p: PoolingParams, prompt_ids: Sequence[int] | None
    ) -> torch.Tensor:
        """token_embed: each row's embedding [n, dims]; token_classify: each row's label
        probabilities [n, L] (STEP pooling: the step rows' chosen columns only)."""
        if p.task == "token_classify":
            if self.token_classifier is None:
                raise ValueError("token_classify on a model without a classifier")
            logits = self.token_classifier(rows)  # [n, L]
            logits = step_select(logits, prompt_ids, p)  # [steps, L'] (STEP only)
            return finish_classification(logits, self.spec, p.use_activation)
        return torch.stack(
            [finish_embedding(r, self.spec, p.use_activation, p.dimensions) for r in rows]
        )

    def _join_partial(
        self, hidden: torch.Tensor, req_ids: list[str], starts: list[int], lens: list[int]
    ) -> tuple[torch.Tensor, list[int], list[int]]:
        """The finishing sequences' full rows, back to back: earlier chunks first."""
        rows: list[torch.Tensor] = []
        new_starts: list[int] = []
        new_lens: list[int] = []
        at = 0
        for r, s, n in zip(req_ids, starts, lens, strict=True):
            seq = [*self.partial.get(r, []), hidden[s : s + n]]
            joined = torch.cat(seq) if len(seq) > 1 else seq[0]
            rows.append(joined)
            new_starts.append(at)
            new_lens.append(joined.shape[0])
            at += joined.shape[0]
        return torch.cat(rows), new_starts, new_lens
