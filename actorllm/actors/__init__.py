"""A generic actor runtime on anyio: bounded mailboxes, supervisors, restarts.

Knows nothing about LLMs. See docs/actors.md for the contract and a runnable example.
"""

from actorllm.actors.actor import Actor
from actorllm.actors.cell import ActorStatistics, Inbox
from actorllm.actors.errors import (
    ActorCrashed,
    ActorError,
    ActorHung,
    ActorStopped,
    MailboxFull,
    NoReply,
    StartFailed,
    SupervisorEscalation,
    SupervisorGaveUp,
    Unrecoverable,
)
from actorllm.actors.lifecycle import (
    TRANSITIONS,
    ActorState,
    LifecycleEvent,
    format_transitions,
)
from actorllm.actors.mailbox import Mailbox, MailboxStatistics
from actorllm.actors.policy import Backoff
from actorllm.actors.probes import Probe, attach_probe
from actorllm.actors.ref import ActorRef
from actorllm.actors.reply import Reply
from actorllm.actors.root import open_supervisor
from actorllm.actors.spec import (
    ChildSpec,
    DeadLetterHook,
    ExitHook,
    Restart,
    Strategy,
    SupervisorSpec,
)
from actorllm.actors.supervisor import Supervisor, SupervisorStatistics

__all__ = [
    "TRANSITIONS",
    "Actor",
    "ActorCrashed",
    "ActorError",
    "ActorHung",
    "ActorRef",
    "ActorState",
    "ActorStatistics",
    "ActorStopped",
    "Backoff",
    "ChildSpec",
    "DeadLetterHook",
    "ExitHook",
    "Inbox",
    "LifecycleEvent",
    "Mailbox",
    "MailboxFull",
    "MailboxStatistics",
    "NoReply",
    "Probe",
    "Reply",
    "Restart",
    "StartFailed",
    "Strategy",
    "Supervisor",
    "SupervisorEscalation",
    "SupervisorGaveUp",
    "SupervisorSpec",
    "SupervisorStatistics",
    "Unrecoverable",
    "attach_probe",
    "format_transitions",
    "open_supervisor",
]
