"""vLLM's ``vllm.utils`` names that user scripts import (``FlexibleArgumentParser``), and
what an application embedding the engine may call (``release_openmp_team``)."""

from actorllm.utils.argparse_utils import FlexibleArgumentParser
from actorllm.worker.omp_spin import release_thread_team as release_openmp_team

__all__ = ["FlexibleArgumentParser", "release_openmp_team"]
