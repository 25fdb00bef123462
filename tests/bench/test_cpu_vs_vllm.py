"""bench/cpu_vs_vllm.py: each row's roofline, and when the figures may not be used."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from actorllm.bench import cpu_vs_vllm
from actorllm.bench.machine import cpu_isa, cpu_model
from actorllm.bench.presets import get_preset
from actorllm.bench.roofline_model import ModelShape, preset_floor, record_gemm

PRESET = "llama-1l-128-256req"


def write_roofline(path: Path, **machine: Any) -> None:
    """A roofline.py result measured on this machine (``machine`` overrides), every linear
    of PRESET at 50 GFLOP/s, 20 GB/s."""
    p = get_preset(PRESET)
    table: dict[str, Any] = {}
    for name, nk in ModelShape.from_config(p.model_config, p.dtype).linears().items():
        for m in (1, 2048):
            record_gemm(table, p.dtype, name, nk, m, {"ms": 1.0, "gflops": 50.0})
    here = {"cpu_model": cpu_model(), "isa": cpu_isa(), "torch_threads": torch.get_num_threads()}
    doc = {
        "machine": {**here, **machine},
        "figures": {"bandwidth": {"read_gbs": 20.0}, "gemm": {}, "linear_gemm": table},
    }
    path.write_text(json.dumps(doc))


def test_row_roofline_against_the_median_runs(tmp_path: Path) -> None:
    write_roofline(tmp_path / "r.json")
    machine, info = cpu_vs_vllm.load_roofline(str(tmp_path / "r.json"), None)
    assert machine is not None and info["skipped"] is None
    floor = preset_floor(get_preset(PRESET), machine).floor_s
    # 1000 output tokens: actorllm's median run takes 2 floors, vLLM's 4.
    figures = {
        "workload": {"output_tokens": 1000},
        "actorllm": {"runs": [1000 / (2 * floor), 1000 / floor, 1000 / (3 * floor)]},
        "vllm": {"runs": [1000 / (4 * floor)]},
    }
    row = cpu_vs_vllm.row_roofline(PRESET, figures, machine, info)
    assert row["floor_s"] == pytest.approx(floor)
    assert row["actorllm_pct"] == pytest.approx(50.0)
    assert row["vllm_pct"] == pytest.approx(25.0)
    assert row["bound"] in ("memory", "compute")
    assert row["prefill_s"] + row["decode_s"] == pytest.approx(floor)
    table = cpu_vs_vllm._table_row({"preset": PRESET, "roofline": row})
    assert (table["actorllm_pct"], table["vllm_pct"]) == (row["actorllm_pct"], row["vllm_pct"])


def test_a_row_whose_shapes_were_not_measured_is_skipped(tmp_path: Path) -> None:
    write_roofline(tmp_path / "r.json")
    machine, info = cpu_vs_vllm.load_roofline(str(tmp_path / "r.json"), None)
    row = cpu_vs_vllm.row_roofline("qwen3-75m-bf16", {}, machine, info)
    assert "no bfloat16 GEMM figures" in row["skipped"]
    assert cpu_vs_vllm._table_row({"roofline": row})["floor_s"] is None


def test_figures_of_another_machine_are_skipped(tmp_path: Path) -> None:
    write_roofline(tmp_path / "r.json", cpu_model="Some Other CPU")
    machine, info = cpu_vs_vllm.load_roofline(str(tmp_path / "r.json"), None)
    assert machine is None and "cpu_model 'Some Other CPU'" in info["skipped"]
    assert cpu_vs_vllm.row_roofline(PRESET, {}, None, info) == {"skipped": info["skipped"]}
    # Another thread count is another machine too.
    write_roofline(tmp_path / "r.json")
    machine, info = cpu_vs_vllm.load_roofline(str(tmp_path / "r.json"), 1000)
    assert machine is None and "torch_threads" in info["skipped"]


def test_default_and_missing_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    machine, info = cpu_vs_vllm.load_roofline(None, None)
    assert machine is None and "benchmarks/results/roofline.json" in info["skipped"]
    assert cpu_vs_vllm.load_roofline("none", None) == (
        None,
        {"path": None, "skipped": "--roofline none"},
    )
    with pytest.raises(ValueError, match="--roofline"):
        cpu_vs_vllm.load_roofline("missing.json", None)
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    write_roofline(tmp_path / "benchmarks" / "results" / "roofline.json")
    machine, info = cpu_vs_vllm.load_roofline(None, None)
    assert machine is not None and info["path"] == "benchmarks/results/roofline.json"
