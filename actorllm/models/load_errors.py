"""The typed errors of reading a checkpoint's weights (torch-free, so the file lookup and
the pickle reader raise them without importing the loader)."""


class WeightLoadError(RuntimeError):
    """The checkpoint cannot be loaded into the model."""


class MissingCheckpointError(WeightLoadError, FileNotFoundError):
    """No weight files of the kind the load format reads where the model path says."""


class UnsafePickleError(WeightLoadError):
    """A PyTorch weight file that ``torch.load(weights_only=True)`` refuses: reading it
    would run code from the file (full unpickling), which is never done."""
