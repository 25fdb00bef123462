"""A runner's model bound into its parallel group (``ModelRunner.attach_tp``).

Tensor parallel: the model's collectives go through the group's ``comm``
(``models/parallel.py``). Pipeline parallel: its stage-to-stage sends and receives go
through a :class:`~actorllm.distributed.pipe.StageLink` over that ``comm``; rank 0 holds the
last stage and sends each step to the others first, so its launcher posts the receive of a
step's hidden states as soon as the step is launched (``prefetch``) and waits for them at
the forward. Bound again after every reload (``wake_up`` at level 2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from actorllm.models.base import CausalLM
from actorllm.worker.step_launch import StepLauncher

if TYPE_CHECKING:
    from actorllm.distributed.comm import GlooComm
    from actorllm.distributed.pipe import StageLink


def bind_group(
    model: CausalLM,
    comm: GlooComm,
    *,
    pp_size: int,
    link: StageLink | None,
    launcher: StepLauncher,
    hidden_size: int,
    dtype: torch.dtype,
) -> StageLink | None:
    """Bind ``model`` to ``comm``; returns the stage link now in use (pipeline parallel;
    ``link``, the previous group's, is closed) or None."""
    if pp_size == 1:
        model.bind_comm(comm)
        return None
    from actorllm.distributed.pipe import StageLink

    if link is not None:
        link.close()  # the previous group's receiver thread
    new = StageLink(comm, pp_size)
    model.bind_pipe(new)
    if launcher.before_forward is not None:  # rank 0, the last stage: deferred
        launcher.prefetch = lambda t: new.prefetch((2, t, hidden_size), dtype)
    return new
