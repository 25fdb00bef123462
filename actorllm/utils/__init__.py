"""vLLM's ``vllm.utils`` names that user scripts import (``FlexibleArgumentParser``)."""

from actorllm.utils.argparse_utils import FlexibleArgumentParser

__all__ = ["FlexibleArgumentParser"]
