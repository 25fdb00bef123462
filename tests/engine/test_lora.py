"""LoRA through ``AsyncEngine`` on a tiny real Llama: concurrent requests of the base model
and 3 adapters with ``max_loras=2`` give peft's greedy tokens; bad adapters are refused by
name and the engine keeps serving; a LoRA request to an engine without LoRA is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest

from actorllm.core.errors import InvalidRequestError
from actorllm.core.lora import LoRARequest
from actorllm.core.sampling_params import SamplingParams
from actorllm.engine import AsyncEngine
from actorllm.testing.engine_harness import check_invariants, engine_context, inject_fault
from tests.helpers.lora import ATTN_PROJ, make_adapter, peft_greedy

pytestmark = pytest.mark.anyio

GREEDY = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
PROMPT = [11, 42, 97, 300, 5]


@pytest.fixture(scope="module")
def adapters(tiny_model: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("adapters")
    return {
        "sql": make_adapter(tiny_model, d / "sql", r=8, seed=1),
        "chat": make_adapter(tiny_model, d / "chat", r=4, seed=2, use_rslora=True),
        "attn": make_adapter(tiny_model, d / "attn", targets=ATTN_PROJ, r=16, seed=3),
    }


def _open(model: str, **kw: object):  # type: ignore[no-untyped-def]
    # float32 as peft's reference: "auto" is bf16 on a CPU with hardware bf16, where the
    # adapters' math is bf16 too and a near tie may flip a greedy token.
    kw.setdefault("dtype", "float32")
    kw.setdefault("max_model_len", 256)
    kw.setdefault("kv_cache_memory_bytes", 4 * 2**20)
    return AsyncEngine.open(model, **kw)


async def _tokens(eng: AsyncEngine, lora: LoRARequest | None, prompt: list[int]) -> list[int]:
    last = None
    async for out in eng.generate({"prompt_token_ids": prompt}, GREEDY, lora_request=lora):
        last = out
    assert last is not None
    return list(last.outputs[0].token_ids)


Rows = dict[str, LoRARequest | None]


def _rows(adapters: dict[str, Path]) -> Rows:
    loras = {n: LoRARequest(n, i + 1, str(p)) for i, (n, p) in enumerate(adapters.items())}
    return {"base": None, "base2": None, **loras}


@pytest.fixture(scope="module")
def expected(tiny_model: str, adapters: dict[str, Path]) -> dict[str, list[int]]:
    """peft's greedy tokens of every row."""
    rows = _rows(adapters)
    return peft_greedy(
        tiny_model, {r: (None if lo is None else lo.lora_path, PROMPT) for r, lo in rows.items()},
        GREEDY.max_tokens or 0,
    )  # fmt: skip


async def _run_rows(eng: AsyncEngine, rows: Rows) -> dict[str, list[int]]:
    got: dict[str, list[int]] = {}

    async def one(row: str) -> None:
        got[row] = await _tokens(eng, rows[row], PROMPT)

    async with anyio.create_task_group() as tg:
        for row in rows:
            tg.start_soon(one, row)
    return got


async def test_mixed_adapters_equal_peft(
    tiny_model: str, adapters: dict[str, Path], expected: dict[str, list[int]]
) -> None:
    rows = _rows(adapters)
    async with _open(tiny_model, enable_lora=True, max_loras=2, max_lora_rank=16) as eng:
        got = await _run_rows(eng, rows)
        assert {r.lora_name for r in eng.list_loras()} == set(adapters)
        await check_invariants(eng)
    assert got == expected
    assert len({tuple(t) for t in got.values()}) == 4  # every adapter changes the output


@pytest.mark.parametrize("actor", ["worker", "scheduler", "input_processor", "output_processor"])
async def test_a_crash_during_a_mixed_adapter_batch_changes_nothing(
    tiny_model: str, adapters: dict[str, Path], expected: dict[str, list[int]], actor: str
) -> None:
    """The adapters ride in the ledger: the replayed requests run with their own adapter."""
    async with _open(tiny_model, enable_lora=True, max_loras=2, max_lora_rank=16) as eng:
        for name, path in adapters.items():  # loaded before the batch: the fault hits it
            await eng.add_lora(LoRARequest(name, len(name), str(path)))
        if actor == "input_processor":  # it sees only the arrivals: crash at the third
            inject_fault(eng, actor, at_message=3)
        else:
            inject_fault(eng, actor, at_step=3)
        got = await _run_rows(eng, _rows(adapters))
        await check_invariants(eng)
        restarts = eng._actor_stat("restarts")
    assert restarts["executor" if actor == "worker" else actor] >= 1, restarts
    assert got == expected


async def test_bad_adapters_are_refused_by_name(
    tiny_model: str, adapters: dict[str, Path], tmp_path: Path
) -> None:
    sql = adapters["sql"]
    high = make_adapter(tiny_model, tmp_path / "high", r=32, seed=4)
    not_dir = tmp_path / "empty"
    not_dir.mkdir()
    dora = tmp_path / "dora"
    shutil.copytree(sql, dora)
    cfg = json.loads((dora / "adapter_config.json").read_text())
    (dora / "adapter_config.json").write_text(json.dumps({**cfg, "use_dora": True}))
    cases = {
        "nodir": (tmp_path / "missing", "not a local directory"),
        "empty": (not_dir, "not a PEFT adapter directory"),
        "high": (high, "LoRA rank 32 is greater than max_lora_rank=16"),
        "dora": (dora, "DoRA"),
    }
    async with _open(tiny_model, enable_lora=True, max_lora_rank=16) as eng:
        for i, (name, (path, reason)) in enumerate(cases.items()):
            with pytest.raises(InvalidRequestError, match=reason) as info:
                await _tokens(eng, LoRARequest(name, i + 1, str(path)), PROMPT)
            assert repr(name) in str(info.value)
        assert eng.list_loras() == []
        ok = await _tokens(eng, LoRARequest("sql", 9, str(sql)), PROMPT)
        assert len(ok) == GREEDY.max_tokens
        assert await eng.remove_lora("sql") and not await eng.remove_lora("sql")
        await check_invariants(eng)


async def test_lora_request_without_enable_lora_is_refused(
    tiny_model: str, adapters: dict[str, Path]
) -> None:
    async with _open(tiny_model) as eng:
        with pytest.raises(InvalidRequestError, match="enable_lora"):
            await _tokens(eng, LoRARequest("sql", 1, str(adapters["sql"])), PROMPT)
        assert len(await _tokens(eng, None, PROMPT)) == GREEDY.max_tokens


def _pinned(worker: Any) -> list[str]:
    return sorted(worker.model_runner.lora.pinned)


@pytest.mark.parametrize("actor", ["worker", "scheduler"])
async def test_a_restarted_worker_gets_the_pins_back(
    tiny_model: str, adapters: dict[str, Path], expected: dict[str, list[int]], actor: str
) -> None:
    """The engine's record of the pins outlives the worker: a worker that comes back from a
    crash without its adapters (as the Ray backend's replaced host does) is pinned again
    before the new core's first step, and the scheduler still counts the pin."""
    async with _open(tiny_model, enable_lora=True, max_loras=2, max_lora_rank=16) as eng:
        sql = LoRARequest("sql", 1, str(adapters["sql"]))
        await eng.add_lora(sql)
        assert await eng.pin_lora("sql")
        assert await eng.collective_rpc(_pinned) == [["sql"]]
        # The worker forgets the adapter, as a new one knows none; then the core crashes.
        await eng.collective_rpc(lambda w: w.model_runner.remove_lora("sql"))
        inject_fault(eng, actor, at_step=2)
        got = await _run_rows(eng, {"base": None, "sql": sql})
        assert eng._actor_stat("restarts")["executor"] >= 1
        assert await eng.collective_rpc(_pinned) == [["sql"]]
        assert engine_context(eng).admission.pinned_loras == {"sql"}
        await check_invariants(eng)
    assert got == {"base": expected["base"], "sql": expected["sql"]}
