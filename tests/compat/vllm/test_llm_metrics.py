"""``LLM.get_metrics()`` as vLLM's speculative decoding example reads it: the draft counters
and the per-position acceptance vector, equal to the engine's statistics."""

from actorllm import LLM, SamplingParams
from actorllm.v1.metrics.reader import Counter, Gauge, Vector
from tests.helpers.spec_model import PROMPT_IDS, SPEC, small_vocab_llama


def test_spec_decode_counters_as_vllms_example_reads_them(tmp_path) -> None:
    model = small_vocab_llama(tmp_path)
    with LLM(model, max_model_len=256, kv_cache_memory_bytes=4 * 2**20,
             speculative_config=SPEC) as llm:  # fmt: skip
        prompts = [{"prompt_token_ids": ids} for ids in PROMPT_IDS]
        params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
        llm.generate(prompts, params, use_tqdm=False)
        totals: dict[str, int] = {}
        per_pos: list[int] = []
        for metric in llm.get_metrics():
            if metric.name == "actorllm:spec_decode_num_accepted_tokens_per_pos":
                assert isinstance(metric, Vector)
                per_pos = metric.values
            elif metric.name.startswith("actorllm:spec_decode_"):
                assert isinstance(metric, Counter)
                totals[metric.name.removeprefix("actorllm:")] = metric.value
        stats = llm.get_stats()
        assert totals == {
            "spec_decode_num_drafts": stats.spec_decode_num_drafts,
            "spec_decode_num_draft_tokens": stats.spec_decode_num_draft_tokens,
            "spec_decode_num_accepted_tokens": stats.spec_decode_num_accepted_tokens,
        }
        assert stats.spec_decode_num_draft_tokens > 0
        assert per_pos == stats.spec_decode_num_accepted_tokens_per_pos
        assert sum(per_pos) == stats.spec_decode_num_accepted_tokens
        # The request counters move with the run (a second call reads the engine again).
        success = [m for m in llm.get_metrics() if m.name == "actorllm:request_success"]
        assert sum(m.value for m in success) == len(prompts)
        assert any(isinstance(m, Gauge) for m in llm.get_metrics())
