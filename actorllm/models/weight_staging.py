"""``StagingArea``: a weight update held aside, per parameter, until it is applied whole.

Theory of operation: each parameter an update touches gets a staging buffer of its own
shape (``empty_like``). A received tensor lands in its part of that buffer (for a packed
``qkv_proj`` / ``gate_up_proj``, its row range): directly, as the receive buffer itself,
when no slicing or conversion is needed (one rank, the parameter's dtype, our layout);
otherwise it is checked and cut to this rank's piece (``loader._resolve_one``, the
loader's own path) and copied in. Nothing touches the model until :meth:`commit`, which
runs between two steps: a buffer that covers its whole parameter replaces the
parameter's storage (on CPU: no copy); a partly covered one (an update of q only, or on
CUDA, where captured graphs hold the old addresses) is copied into the written parts.

    area = StagingArea(model)
    view = area.landing("model.norm.weight", (64,), torch.float32)   # receive into it
    area.put("model.layers.0.self_attn.q_proj.weight", tensor)        # or check + copy
    area.commit()                                                      # between steps
"""

from __future__ import annotations

from typing import final

import torch

from actorllm.models.base import CausalLM
from actorllm.models.loader import (
    ShardKey,
    WeightLoadError,
    _missing,
    _packed_target,
    _resolve_one,
    _shard_view,
)
from actorllm.models.onednn_linear import invalidate_packed


@final
class StagingArea:
    def __init__(self, model: CausalLM, spares: dict[str, torch.Tensor] | None = None) -> None:
        self.model = model
        # {target param: storage an earlier commit replaced}: reused as staging buffers,
        # so a steady stream of updates does not fault in fresh pages for each one (CPU).
        self.spares = spares if spares is not None else {}
        self.params = dict(model.named_parameters(remove_duplicate=False))
        self.buffers: dict[str, torch.Tensor] = {}  # {target param: staged values, its shape}
        self.written: dict[str, set[ShardKey]] = {}  # {target param: shards staged}
        # Our layout is the checkpoint's (no transpose, no slicing): tensors can land as is.
        self._direct = (
            model.config.tp_size == 1
            and type(model).checkpoint_tensor is CausalLM.checkpoint_tensor
            and model.transposed_weights is None
        )

    def _view(self, target: str, shard: ShardKey) -> torch.Tensor:
        buf = self.buffers.get(target)
        if buf is None:
            param = self.params[target].data
            spare = self.spares.pop(target, None)
            fits = spare is not None and (spare.shape, spare.dtype, spare.device) == (
                param.shape,
                param.dtype,
                param.device,
            )
            buf = spare if fits and spare is not None else torch.empty_like(param)
            self.buffers[target] = buf
        return buf if shard is None else _shard_view(self.model, buf, target, shard)

    def landing(
        self, hf_name: str, shape: tuple[int, ...], dtype: torch.dtype
    ) -> torch.Tensor | None:
        """Where tensor ``hf_name`` can be received in place (then it is staged), or None:
        receive it elsewhere and :meth:`put` it. ``WeightLoadError`` for a name the model
        lacks."""
        if not self._direct:
            return None
        name = self.model.checkpoint_name(hf_name)
        if name is None or (name == "lm_head.weight" and self.model.config.tie_word_embeddings):
            return None
        target, shard = _packed_target(self.model, name)
        param = self.params.get(target)
        if param is None:
            raise WeightLoadError(f"{hf_name}: the model has no such parameter")
        if param.dtype != dtype:
            return None  # put() converts (and refuses a change of kind)
        view = self._view(target, shard)
        if tuple(view.shape) != tuple(shape) or not view.is_contiguous():
            return None  # put() names the mismatch
        self.written.setdefault(target, set()).add(shard)
        return view

    def put(self, hf_name: str, tensor: torch.Tensor) -> None:
        """Check ``tensor`` (whole, unsharded) against the model and stage this rank's piece
        of it (a copy); ``WeightLoadError`` naming it when it does not fit."""
        resolved = _resolve_one(self.model, self.params, hf_name, tensor, strict=True)
        if resolved is None or isinstance(resolved, str):
            return  # nothing to write (a tied head, an ignored tensor)
        staged = resolved[1]
        self._view(staged.target, staged.shard).copy_(staged.tensor)
        self.written.setdefault(staged.target, set()).add(staged.shard)

    def commit(self) -> list[str]:
        """Apply every staged parameter (between steps); returns the parameters written.
        The storage a whole parameter gave up is kept in :attr:`retired` (the next
        update's spares)."""
        self.retired: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            for target, buf in self.buffers.items():
                param, shards = self.params[target], self.written.get(target, set())
                whole = not _missing(self.model, {target: param}, {target: shards})
                if whole and param.device.type == "cpu":
                    self.retired[target] = param.data
                    param.data = buf  # the storage is replaced: no copy
                else:
                    for shard in shards:
                        dst = param.data if shard is None else _shard_view(
                            self.model, param.data, target, shard
                        )  # fmt: skip
                        src = buf if shard is None else _shard_view(self.model, buf, target, shard)
                        dst.copy_(src)
        invalidate_packed(self.model)  # the packed copies of the written linears are stale
        written = sorted(self.buffers)
        self.buffers, self.written = {}, {}
        return written
