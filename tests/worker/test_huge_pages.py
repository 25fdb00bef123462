"""KV cache huge pages (worker/huge_pages.py): aligned, zeroed and writable where the OS
offers THP; a plain ``torch.zeros`` fallback wherever it does not."""

from __future__ import annotations

import mmap
from pathlib import Path
from unittest import mock

import pytest
import torch

from actorllm.models.config import CheckpointConfig
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
    cfg = CheckpointConfig.from_dict(
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


MiB = 1 << 20


def test_windows_widen_to_huge_pages_inside_their_mapping_and_merge() -> None:
    vmas = [(1 * MiB, 21 * MiB), (40 * MiB, 50 * MiB)]
    spans = [
        (3 * MiB, 9 * MiB),  # widened to [2, 10)
        (9 * MiB, 11 * MiB),  # [8, 12): overlaps the first, merged
        (19 * MiB, 20 * MiB),  # [18, 20); [20, 22) would leave the mapping
        (41 * MiB, 41 * MiB + 1),  # [40, 42)
        (60 * MiB, 70 * MiB),  # in no anonymous mapping (a file's): nothing
    ]
    assert huge_pages.huge_windows(spans, vmas) == [
        (2 * MiB, 12 * MiB),
        (18 * MiB, 20 * MiB),
        (40 * MiB, 42 * MiB),
    ]
    assert huge_pages.huge_windows([(1 * MiB, 2 * MiB)], [(1 * MiB, 3 * MiB)]) == []


def test_model_spans_are_each_big_storage_once_packed_weights_included() -> None:
    from actorllm.models.onednn_linear import prepack_linears, supported_dtypes

    model = torch.nn.Sequential(torch.nn.Linear(1024, 512), torch.nn.LayerNorm(512))
    model.add_module("tied", torch.nn.Linear(1024, 512))
    model.tied.weight = model[0].weight  # one storage, two owners
    packed = prepack_linears(model) if torch.float32 in supported_dtypes() else 0
    spans = huge_pages.model_spans(model)
    w = model[0].weight.untyped_storage()
    assert (w.data_ptr(), w.data_ptr() + 2 * MiB) in spans  # [512, 1024] float32, once
    assert all(b - a >= huge_pages.MIN_SPAN_BYTES for a, b in spans)  # no norm, no bias
    assert len(spans) == 1 + packed  # each Linear's oneDNN copy is its own storage


def test_anonymous_ranges_keep_private_writable_memory_without_a_file(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    maps.write_text(
        "55ff81dcf000-55ff87245000 rw-p 00000000 00:00 0          [heap]\n"
        "7f0000000000-7f0004000000 rw-p 00000000 00:00 0 \n"
        "7f0004000000-7f0008000000 ---p 00000000 00:00 0 \n"
        "7f0010000000-7f0010001000 rw-p 00005000 fe:00 29734      /usr/lib/libx.so\n"
        "7f0020000000-7f0020200000 rw-s 00000000 00:05 12         /dev/shm/ring\n"
        "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0          [stack]\n"
    )
    assert huge_pages.anonymous_ranges(maps) == [
        (0x55FF81DCF000, 0x55FF87245000),
        (0x7F0000000000, 0x7F0004000000),
    ]


def test_anon_huge_bytes_reads_smaps_rollup(tmp_path: Path) -> None:
    rollup = tmp_path / "smaps_rollup"
    rollup.write_text("Rss:  1052456 kB\nAnonHugePages:  348160 kB\nShmemPmdMapped:  0 kB\n")
    assert huge_pages.anon_huge_bytes(rollup) == 348160 * 1024
    assert huge_pages.anon_huge_bytes(tmp_path / "missing") == 0


@pytest.mark.skipif(
    not huge_pages.huge_pages_usable() or not Path("/proc/self/smaps_rollup").exists(),
    reason="no transparent huge pages here",
)
def test_a_models_weights_end_on_huge_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    real = huge_pages._libc_madvise()
    if real is None:
        pytest.skip("no libc madvise")
    calls: list[tuple[int, int, int]] = []

    def recording(addr: int, length: int, advice: int) -> int:
        calls.append((addr, length, advice))
        return int(real(addr, length, advice))

    monkeypatch.setattr(huge_pages, "_libc_madvise", lambda: recording)
    # Fresh private memory the test owns (Python's mmap defaults to MAP_SHARED), as a
    # model's weight: the windows around it are this mapping's alone.
    buf = mmap.mmap(-1, 96 * MiB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    x = torch.frombuffer(buf, dtype=torch.float32)  # [24 Mi]
    x.fill_(1.0)
    model = torch.nn.Module()
    model.weight = torch.nn.Parameter(x, requires_grad=False)
    before = huge_pages.anon_huge_bytes()
    huge_pages.model_on_huge_pages(model)
    gained = huge_pages.anon_huge_bytes() - before
    # What was asked is exact: every whole huge page of the tensor, advised then collapsed.
    lo, hi = x.data_ptr(), x.data_ptr() + 96 * MiB
    covered = sum(
        min(hi, a + n) - max(lo, a)
        for a, n, advice in calls
        if advice == huge_pages.MADV_COLLAPSE and a < hi and a + n > lo
    )
    assert covered >= 96 * MiB - 2 * huge_pages.HUGE_PAGE
    assert {advice for _, _, advice in calls} == {
        mmap.MADV_HUGEPAGE,
        huge_pages.MADV_COLLAPSE,
    }
    # What the kernel does is best effort (a window it cannot compact stays on 4 KiB
    # pages), so only some of it must have happened.
    if gained == 0:
        pytest.skip("the kernel collapsed nothing (no MADV_COLLAPSE before Linux 6.1)")
    assert gained >= huge_pages.HUGE_PAGE  # one at least
    assert float(x.sum()) == 96 * MiB // 4  # the contents are untouched


def test_small_models_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int, int]] = []
    monkeypatch.setattr(huge_pages, "_libc_madvise", lambda: lambda *a: calls.append(a) or 0)
    huge_pages.model_on_huge_pages(torch.nn.Linear(2048, 2048))  # 16 MiB: under the minimum
    assert calls == []


def test_the_engine_setting_reaches_the_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    from actorllm.engine.actors import startup
    from actorllm.engine.config.engine_config import EngineConfig

    seen: list[object] = []
    monkeypatch.setattr(
        "actorllm.worker.model_runner.ModelRunner",
        lambda *a, **k: seen.append(k["weights_on_huge_pages"]),
    )
    startup.default_runner_factory(EngineConfig(device="cpu"))
    startup.default_runner_factory(EngineConfig(device="cpu", cpu_weights_on_huge_pages=False))
    assert seen == [True, False]
