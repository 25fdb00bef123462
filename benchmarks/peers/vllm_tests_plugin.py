"""A pytest plugin that points vLLM 0.32's own OpenAI-server tests at another server.

Loaded with ``-p vllm_tests_plugin`` (this folder on ``PYTHONPATH``) from the root of vLLM's
source distribution. ``RemoteOpenAIServer`` then launches ``$CONTRACT_SERVE`` (a JSON list:
the command before the model, e.g. ``["actorllm", "serve"]``) ``$CONTRACT_MODEL
--served-model-name <the test's model> <the test's flags> $CONTRACT_EXTRA_ARGS``
(a JSON list, optional: the runner's per-file extra arguments for one server), and
``RemoteLaunchRenderServer`` ``$CONTRACT_RENDER`` (the render-only server, e.g.
``["actorllm", "launch", "render"]``) the same way, so every test runs unchanged against one
local model; the hub is never reached (names of hub models
resolve to the local model for tokenizers, configs and the reference runners' models too;
the LoRA adapters the fixtures download resolve to ``$CONTRACT_LORAS``, a JSON object
{hub name: local adapter directory}).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any


def _local(name: Any) -> Any:
    """A hub name (not a local directory) becomes the local model."""
    if isinstance(name, str) and not os.path.isdir(name):
        return os.environ["CONTRACT_MODEL"]
    return name


class _LocalHub:
    """Stands in for ``vllm.transformers_utils.repo_utils.hf_api()``: downloads resolve to
    the local adapters and model."""

    def __init__(self) -> None:
        self.loras: dict[str, str] = json.loads(os.environ.get("CONTRACT_LORAS", "{}"))

    def snapshot_download(self, repo_id: str, *args: Any, **kwargs: Any) -> str:
        return self.loras.get(repo_id) or _local(repo_id)

    def hf_hub_download(self, repo_id: str, filename: str, *args: Any, **kwargs: Any) -> str:
        return os.path.join(self.snapshot_download(repo_id), filename)


def _redirect(cls: Any) -> None:
    """``cls.from_pretrained`` loads the local model for a hub name."""
    load = cls.from_pretrained.__func__
    cls.from_pretrained = classmethod(lambda c, name, *a, **kw: load(c, _local(name), *a, **kw))


def pytest_configure(config: Any) -> None:
    import transformers
    import vllm.tokenizers as vt
    import vllm.transformers_utils.repo_utils as repo_utils

    import tests.conftest as tc
    import tests.utils as tu

    model = os.environ["CONTRACT_MODEL"]
    extra: list[str] = json.loads(os.environ.get("CONTRACT_EXTRA_ARGS", "[]"))

    def launcher(variable: str) -> Any:
        def start(self: Any, name: str, args: list[str], env_dict: dict[str, str] | None) -> None:
            command: list[str] = json.loads(os.environ[variable])
            env = os.environ.copy()
            env.update(env_dict or {})
            cmd = [*command, model, "--served-model-name", name, *args, *extra]
            print("contract: launching", " ".join(cmd), flush=True)
            self.proc = subprocess.Popen(
                cmd, env=env, stdout=sys.stdout, stderr=sys.stderr, start_new_session=True
            )

        return start

    tu.RemoteOpenAIServer._start_server = launcher("CONTRACT_SERVE")
    tu.RemoteLaunchRenderServer._start_server = launcher("CONTRACT_RENDER")
    tu.RemoteVLLMServer._pre_download_model = lambda self, model, args: None
    tu.RemoteLaunchRenderServer._pre_download_model = lambda self, model, args: None
    # The reference runners (HfRunner, sentence-transformers) load the local model too.
    tc.maybe_model_redirect = _local

    get_tokenizer = vt.get_tokenizer
    vt.get_tokenizer = lambda name, *a, **kw: get_tokenizer(_local(name), *a, **kw)
    for auto in ("AutoTokenizer", "AutoConfig", "AutoModel", "AutoModelForCausalLM"):
        _redirect(getattr(transformers, auto))
    hub = _LocalHub()
    repo_utils.hf_api = lambda *a, **kw: hub
