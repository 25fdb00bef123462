"""The tensor-parallel group's failure, importable without torch (the executor raises it)."""


class RankGroupError(RuntimeError):
    """The tensor-parallel group is broken (a rank died, hung, or a collective failed)."""
