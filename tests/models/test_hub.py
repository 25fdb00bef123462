"""Hub ids resolve through a hub-layout cache built here, offline; local paths stay local."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from actorllm.demo import demo_tokenizer_path
from actorllm.engine.config.engine_config import EngineConfig, ModelNotFoundError
from actorllm.models.checkpoint_files import weight_files
from actorllm.models.config import CheckpointConfig
from actorllm.models.hub import (
    ALLOW_PATTERNS,
    fetched_weights,
    hub_cache_dir,
    looks_like_hub_id,
    resolve_model,
)
from actorllm.models.loader import load_model
from tests.helpers.models import make_tiny_checkpoint

COMMIT = "0123456789abcdef0123456789abcdef01234567"
OTHER = "fedcba9876543210fedcba9876543210fedcba98"


def hub_cache(root: Path, repo_id: str, files: dict[str, str], *, commit: str = COMMIT) -> Path:
    """``models--org--name/{refs/main, snapshots/<commit>/...}``, as huggingface_hub lays it
    out (blobs are plain files here: the snapshot files need not be symlinks)."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for name, text in files.items():
        (snapshot / name).write_text(text)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    cache = tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def test_hub_id_resolves_to_the_cached_snapshot_of_main(offline: Path) -> None:
    snapshot = hub_cache(offline, "org/tiny", {"config.json": "{}"})
    assert hub_cache_dir() == offline  # $HF_HOME/hub, read at call time
    assert resolve_model("org/tiny") == snapshot


def test_revision_picks_that_snapshot(offline: Path) -> None:
    hub_cache(offline, "org/tiny", {"config.json": "{}"})
    other = offline / "models--org--tiny" / "snapshots" / OTHER
    other.mkdir(parents=True)
    (other / "config.json").write_text("{}")
    assert resolve_model("org/tiny", revision=OTHER) == other
    with pytest.raises(ModelNotFoundError, match="revision v9"):
        resolve_model("org/tiny", revision="v9")


def test_download_dir_and_hf_hub_cache_override_hf_home(
    offline: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    snapshot = hub_cache(elsewhere, "org/tiny", {"config.json": "{}"})
    assert resolve_model("org/tiny", cache_dir=elsewhere) == snapshot
    monkeypatch.setenv("HF_HUB_CACHE", str(elsewhere))
    assert resolve_model("org/tiny") == snapshot


def test_missing_model_names_the_id_and_the_cache(offline: Path) -> None:
    with pytest.raises(ModelNotFoundError) as info:
        resolve_model("nobody/nothing")
    message = str(info.value)
    assert "'nobody/nothing'" in message and str(offline) in message
    assert "HF_HUB_OFFLINE" in message


def test_snapshot_without_config_is_refused(offline: Path) -> None:
    hub_cache(offline, "org/tokenizer-only", {"tokenizer.json": "{}"})
    with pytest.raises(ModelNotFoundError, match=r"no config\.json"):
        resolve_model("org/tokenizer-only")
    assert resolve_model("org/tokenizer-only", required_file=None).is_dir()


def test_local_paths_never_touch_the_hub(tmp_path: Path, offline: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    assert resolve_model(str(tmp_path / "m")) == tmp_path / "m"
    with pytest.raises(ModelNotFoundError, match=r"not a directory with a config\.json"):
        resolve_model(str(tmp_path))
    assert not looks_like_hub_id("./models/x") and not looks_like_hub_id("/abs")
    assert looks_like_hub_id("gpt2") and looks_like_hub_id("Qwen/Qwen3-0.6B")


def test_engine_config_resolves_model_and_tokenizer_from_the_hub(offline: Path) -> None:
    tok_files = {
        p.name: p.read_text() for p in demo_tokenizer_path().iterdir() if p.suffix == ".json"
    }
    snapshot = hub_cache(offline, "org/chat", {"config.json": "{}", **tok_files})
    config = EngineConfig(model="org/chat")
    assert config.resolved_model() == snapshot
    assert config.resolved_tokenizer() == snapshot
    tok = hub_cache(offline, "org/tok", tok_files)
    assert EngineConfig(model="org/chat", tokenizer="org/tok").resolved_tokenizer() == tok
    shutil.rmtree(offline / "models--org--chat")
    with pytest.raises(ModelNotFoundError, match="org/chat"):
        config.resolved_model()


def test_a_gguf_file_is_the_model_and_a_missing_one_is_named(tmp_path: Path) -> None:
    gguf = tmp_path / "model.Q4_K_M.gguf"
    gguf.write_bytes(b"GGUF")
    assert resolve_model(str(gguf)) == gguf  # the loader reads it (models/gguf/)
    with pytest.raises(ModelNotFoundError, match="not a GGUF file that exists"):
        resolve_model(str(tmp_path / "absent.gguf"))
    with pytest.raises(ModelNotFoundError, match="not a tokenizer directory"):
        resolve_model(str(gguf), required_file=None)


def test_a_snapshot_with_only_bin_weights_resolves_and_loads(offline: Path) -> None:
    snapshot = hub_cache(offline, "org/old", {})
    make_tiny_checkpoint(snapshot, "opt", safe_serialization=False)
    assert resolve_model("org/old") == snapshot
    assert [f.name for f in weight_files(snapshot)] == ["pytorch_model.bin"]
    path = EngineConfig(model="org/old", tokenizer=str(demo_tokenizer_path())).resolved_model()
    load_model(path, CheckpointConfig.from_pretrained(path), progress=False)


def test_one_kind_of_weights_is_fetched_in_vllms_order() -> None:
    both = ["config.json", "model.safetensors", "pytorch_model.bin"]
    assert fetched_weights(both) == ["*.safetensors"]
    assert fetched_weights(both, "pt") == ["*.bin"]
    assert fetched_weights(both, "dummy") == []
    assert fetched_weights(["pytorch_model-00001-of-00002.bin", "x.pt"]) == ["*.bin"]
    assert fetched_weights(["training_args.bin", "consolidated.pt"]) == ["*.pt"]
    assert fetched_weights(["config.json"]) == []


def test_online_the_repos_weight_kind_is_asked_for(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import huggingface_hub

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    seen: dict[str, object] = {}

    def list_repo_files(self: object, repo_id: str, revision: str | None = None) -> list[str]:
        return ["config.json", "pytorch_model.bin", "training_args.bin"]

    def snapshot_download(**kw: object) -> str:
        seen.update(kw)
        return str(hub_cache(tmp_path, "org/old", {"config.json": "{}"}))

    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", list_repo_files)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    EngineConfig(model="org/old", download_dir=str(tmp_path), load_format="pt").resolved_model()
    assert seen["allow_patterns"] == [*ALLOW_PATTERNS, "*.bin"]
    assert "training_args.bin" in seen["ignore_patterns"]  # type: ignore[operator]
