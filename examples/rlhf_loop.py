"""An RLHF loop on CPU: a trainer process trains a tiny Qwen3 with a GRPO-style update and
pushes its weights into a running actorllm engine after every step, the way TRL / verl
drive vLLM (docs/rlhf.md).

    python examples/rlhf_loop.py            # 3 steps, a few seconds
    python examples/rlhf_loop.py --steps 5

Each step: the engine generates a group of samples per prompt -> a reward scores them
(here: how many tokens are even) -> the trainer takes an optimizer step on the group-
normalised advantages -> the trainer broadcasts its weights to the engine over a gloo
group (actorllm.distributed.weight_transfer; the engine keeps serving meanwhile and
swaps at a step boundary) -> the engine generates again. After every update the script
checks that the engine's greedy outputs are exactly transformers' greedy outputs with the
trainer's current weights.

The trainer is a separate process that knows nothing of the engine's internals: it talks
to the engine through the four calls of ``VLLMWeightSyncClient`` (here relayed over a
pipe to the process that holds the ``LLM``; over HTTP it would be
``HTTPVLLMWeightSyncClient(url)`` against ``actorllm serve --dev-mode``).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import socket
import tempfile
from multiprocessing.connection import Connection
from typing import Any

import torch

PROMPTS = [[11, 12, 13, 14], [21, 22, 23], [31, 32, 33, 34, 35], [41, 42]]
GROUP = 4  # samples per prompt (GRPO's group)
NEW_TOKENS = 8


def build_model(path: str) -> None:
    """A tiny random Qwen3 (2 layers, hidden 64, vocab 256), weights big enough that
    greedy decoding has clear winners."""
    import transformers

    cfg = transformers.Qwen3Config(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=256, tie_word_embeddings=False, eos_token_id=0,
        bos_token_id=1,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 2.0 / p.shape[-1] ** 0.5)
    model.save_pretrained(path)
    # A word-level tokenizer over the same 256 ids ("t0" .. "t255"), for the engine.
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"t{i}": i for i in range(cfg.vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t2"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="t2", bos_token="t1", eos_token="t0"
    ).save_pretrained(path)


# -- the trainer process ---------------------------------------------------------------------


def trainer(path: str, port: int, world_size: int, cmd: Connection, rpc: Connection) -> None:
    import transformers

    from actorllm.distributed.weight_transfer import (
        GlooTrainerInitInfo,
        ModuleSource,
        PipeWeightSyncClient,
        WeightTransferTrainerFactory,
    )

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-2)
    sync = WeightTransferTrainerFactory.trainer_init(
        GlooTrainerInitInfo(master_address="127.0.0.1", master_port=port, world_size=world_size),
        client=PipeWeightSyncClient(rpc),
        source=ModuleSource(model),
    )
    cmd.send("joined")
    while True:
        op, arg = cmd.recv()
        if op == "train":  # arg: [(prompt, [completion, ...], [reward, ...]), ...]
            model.train()
            optimizer.zero_grad()
            loss = grpo_loss(model, arg)
            loss.backward()
            optimizer.step()
            cmd.send(float(loss.detach()))
        elif op == "sync":  # arg: the version to label the new weights with
            sync.send_weights(weight_version=arg)
            cmd.send("synced")
        elif op == "greedy":
            cmd.send(hf_greedy(model))
        else:
            sync.shutdown()
            return


def grpo_loss(model: Any, groups: list[tuple[list[int], list[list[int]], list[float]]]) -> Any:
    """-mean(advantage * log p(completion | prompt)), advantages normalised per group."""
    losses = []
    for prompt, completions, rewards in groups:
        r = torch.tensor(rewards)
        adv = (r - r.mean()) / (r.std() + 1e-6)  # [G]
        for completion, a in zip(completions, adv, strict=True):
            ids = torch.tensor([prompt + completion])  # [1, P + C]
            logits = model(ids).logits[0, len(prompt) - 1 : -1]  # [C, V]
            logp = torch.log_softmax(logits, -1).gather(1, ids[0, len(prompt) :, None])  # [C, 1]
            losses.append(-a * logp.sum())
    return torch.stack(losses).mean()


def hf_greedy(model: Any) -> list[list[int]]:
    model.eval()
    out = []
    with torch.no_grad():
        for prompt in PROMPTS:
            ids = model.generate(
                torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                do_sample=False, pad_token_id=0,
            )  # fmt: skip
            out.append(ids[0, len(prompt) :].tolist())
    return out


# -- the engine side -------------------------------------------------------------------------


def reward(tokens: list[int]) -> float:
    return sum(t % 2 == 0 for t in tokens) / len(tokens)


def greedy_ids(llm: Any, prompts: list[Any], params: Any) -> list[list[int]]:
    return [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params, use_tqdm=False)]


def main(steps: int = 3) -> None:
    from actorllm import LLM, SamplingParams
    from actorllm.distributed.weight_transfer import serve_weight_sync_calls

    with tempfile.TemporaryDirectory() as path:
        build_model(path)
        llm = LLM(
            path, weight_transfer_config={"backend": "gloo"},
            max_model_len=128, kv_cache_memory_bytes=8 * 2**20, seed=0,
        )  # fmt: skip
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        ctx = mp.get_context("spawn")
        cmd, cmd_child = ctx.Pipe()
        rpc, rpc_child = ctx.Pipe()
        world = 1 + llm.get_world_size()  # the trainer is rank 0
        proc = ctx.Process(target=trainer, args=(path, port, world, cmd_child, rpc_child))
        proc.start()
        assert serve_weight_sync_calls(llm, rpc, until=cmd) == "joined"

        greedy = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
        prompts = [{"prompt_token_ids": p} for p in PROMPTS]
        first = [
            list(o.outputs[0].token_ids) for o in llm.generate(prompts, greedy, use_tqdm=False)
        ]
        changed = 0  # greedy outputs that moved away from the first weights' (the check bites)
        for step in range(1, steps + 1):
            sample = SamplingParams(n=GROUP, temperature=1.0, max_tokens=NEW_TOKENS, seed=step)
            outs = llm.generate(prompts, sample, use_tqdm=False)  # rollouts
            groups = []
            for prompt, out in zip(PROMPTS, outs, strict=True):
                completions = [list(c.token_ids) for c in out.outputs]
                groups.append((prompt, completions, [reward(c) for c in completions]))
            mean = sum(sum(g[2]) for g in groups) / (len(groups) * GROUP)
            cmd.send(("train", groups))
            loss = cmd.recv()
            cmd.send(("sync", f"step-{step}"))
            assert serve_weight_sync_calls(llm, rpc, until=cmd) == "synced"
            got = [
                list(o.outputs[0].token_ids) for o in llm.generate(prompts, greedy, use_tqdm=False)
            ]
            cmd.send(("greedy", None))
            want = cmd.recv()
            assert got == want, f"step {step}: engine {got} != transformers {want}"
            changed = max(changed, sum(g != f for g, f in zip(got, first, strict=True)))
            version = llm.get_weight_version()
            print(f"step {step}: mean reward {mean:.3f}, loss {loss:+.4f}, weights {version}, "
                  "greedy outputs match transformers")  # fmt: skip
        cmd.send(("stop", None))
        proc.join(30)
        llm.close()
        assert changed, "training never changed a greedy output: the check would not bite"
        print(f"{changed} of {len(PROMPTS)} greedy outputs changed over training")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    main(parser.parse_args().steps)
