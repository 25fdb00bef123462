"""KV cache huge pages (worker/huge_pages.py): aligned, zeroed and writable where the OS
offers THP; a plain ``torch.zeros`` fallback wherever it does not."""

from __future__ import annotations

import mmap
from pathlib import Path
from unittest import mock

import pytest
import torch

from actorllm.models.config import ModelConfig
from actorllm.worker import huge_pages
from actorllm.worker.huge_pages import HUGE_PAGE, thp_mode, zeros_on_huge_pages
from actorllm.worker.kv_cache import KVLayout, allocate_kv_caches

SHAPE = (4, 1024, 16, 64)  # [Hk, NB, BS, D]: 8 MiB of bfloat16, four huge pages


def _mode_file(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "enabled"
    p.write_text(text)
    return p


def test_thp_mode_parses_the_bracketed_word(tmp_path: Path) -> None:
    assert thp_mode(_mode_file(tmp_path, "always [madvise] never\n")) == "madvise"
    assert thp_mode(_mode_file(tmp_path, "always madvise [never]\n")) == "never"
    assert thp_mode(tmp_path / "missing") is None


@pytest.mark.parametrize("text", ["always madvise [never]\n", None])
def test_falls_back_to_torch_zeros(tmp_path: Path, text: str | None) -> None:
    path = _mode_file(tmp_path, text) if text else tmp_path / "missing"
    with mock.patch.object(huge_pages.mmap, "mmap", side_effect=AssertionError("mapped")):
        t = zeros_on_huge_pages((8, HUGE_PAGE // 4), torch.float32, path)
    assert t.shape == (8, HUGE_PAGE // 4) and not t.any()


def test_small_tensors_and_mapping_errors_fall_back(tmp_path: Path) -> None:
    path = _mode_file(tmp_path, "always [madvise] never\n")
    with mock.patch.object(huge_pages.mmap, "mmap", side_effect=AssertionError("mapped")):
        assert not zeros_on_huge_pages((16, 16), torch.bfloat16, path).any()
    with mock.patch.object(huge_pages.mmap, "mmap", side_effect=OSError("no memory")):
        t = zeros_on_huge_pages((HUGE_PAGE,), torch.float32, path)
    assert t.shape == (HUGE_PAGE,) and not t.any()


@pytest.mark.skipif(
    not huge_pages.huge_pages_usable() or not hasattr(mmap, "MADV_HUGEPAGE"),
    reason="no transparent huge pages here",
)
def test_huge_page_tensor_is_aligned_zeroed_and_outlives_its_mapping() -> None:
    t = zeros_on_huge_pages(SHAPE, torch.bfloat16)
    assert t.data_ptr() % HUGE_PAGE == 0 and t.is_contiguous() and t.shape == SHAPE
    assert not t.any()
    t.fill_(2.0)  # writable; the mapping lives as long as the tensor
    assert float(t.float().sum()) == 2.0 * t.numel()


@pytest.mark.skipif(
    not huge_pages.huge_pages_usable() or not hasattr(mmap, "MADV_HUGEPAGE"),
    reason="no transparent huge pages here",
)
def test_pages_are_faulted_in_at_allocation_not_in_the_first_write() -> None:
    # Left to first touch, a step's KV write into a fresh block paid the page fault
    # (~0.65 s of a 12 s bf16 benchmark run); like torch.zeros, the pages exist up front.
    import resource

    t = zeros_on_huge_pages((64, HUGE_PAGE // 2), torch.bfloat16)  # 64 huge pages
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t.view(64, -1)[:, ::2048].fill_(1.0)  # one element in every 4 KiB page
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert faults < 16, faults  # untouched: one per huge page at least (64), or 32768


@pytest.mark.parametrize("layout", ["contiguous", "head_major", "block_major"])
def test_cpu_kv_caches_are_zeroed_and_independent(layout: KVLayout) -> None:
    cfg = ModelConfig.from_dict(
        {
            "architectures": ["LlamaForCausalLM"],
            "vocab_size": 32,
            "hidden_size": 256,
            "intermediate_size": 16,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
        }
    )
    # 1200 blocks: 4.7 MiB per tensor, past one huge page (the mapped path where THP is on)
    caches = allocate_kv_caches(cfg, 1200, 16, torch.bfloat16, "cpu", layout=layout)
    assert len(caches) == 2
    for k, v in caches:
        assert k.shape == v.shape == (1200, 16, 2, 64) and not k.any() and not v.any()
    caches[0][0][5, 3] = 1.0  # one slot of one tensor: nothing else moves
    assert int(caches[0][0].count_nonzero()) == 2 * 64
    assert not caches[0][1].any() and not caches[1][0].any()
