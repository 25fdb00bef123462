"""The local models vLLM's server tests run on (``vllm_server_tests.py``): tiny random
checkpoints built here from transformers configs, so neither server reaches the hub.

Each builder writes one directory under ``cache`` (once) that both ``vllm serve`` and
``actorllm serve`` load, and that the tests' reference runners (``HfRunner``,
sentence-transformers) load too. Weights are random (seeded): tests that check what an
answer means fail on both servers, and are not part of the contract.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEMO_TOKENIZER = ROOT / "actorllm" / "demo" / "tokenizer"
QWEN3_TEMPLATE = Path(__file__).with_name("qwen3_chat_template.jinja")
# Qwen3's own added tokens (not special: they stay in decoded text, where the qwen3
# reasoning parser and the hermes tool parser look for them).
QWEN3_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>"]


def demo(out: Path) -> None:
    """The demo model (a random Llama, head_dim 64) with its tokenizer."""
    for part in ("weights", "tokenizer"):
        for f in (ROOT / "actorllm" / "demo" / part).iterdir():
            shutil.copy(f, out / f.name)


def qwen3(out: Path, vocab_size: int | None = None) -> None:
    """A random Qwen3 (head_dim 64, as vLLM's CPU attention needs >= 32) with the demo's
    byte-level BPE plus Qwen3's think and tool-call tokens, and Qwen3's chat template (the
    Responses API tests: ``--reasoning-parser qwen3``). ``vocab_size``: the model's rows,
    past the tokenizer's (None: the tokenizer's)."""
    import torch
    import transformers

    tok = transformers.PreTrainedTokenizerFast.from_pretrained(DEMO_TOKENIZER)
    tok.add_tokens(QWEN3_TOKENS)
    tok.chat_template = QWEN3_TEMPLATE.read_text()
    tok.save_pretrained(out)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    cfg = transformers.Qwen3Config(
        vocab_size=vocab_size or len(tok), hidden_size=128, intermediate_size=256,
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=64,
        max_position_embeddings=40960, tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=im_end, pad_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.Qwen3ForCausalLM(cfg).save_pretrained(out)
    transformers.GenerationConfig(eos_token_id=[im_end, 0]).save_pretrained(out)


def qwen3_wide(out: Path) -> None:
    """The random Qwen3 with Qwen3-0.6B's 151936 vocabulary rows (its tokenizer stays the
    demo's): vLLM's generative scoring tests name label ids past the demo's vocabulary."""
    qwen3(out, vocab_size=151936)


def _wordpiece(out: Path) -> None:
    """A BERT WordPiece tokenizer trained on the text of vLLM's pooling tests (so their
    sentences take a few tokens each, as with a real vocabulary)."""
    import tokenizers
    import transformers

    corpus = [p.read_text() for p in sorted(_corpus_dir(out).rglob("*.py"))]
    model = tokenizers.models.WordPiece(unk_token="[UNK]")
    tk = tokenizers.Tokenizer(model)
    tk.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=True)
    tk.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    trainer = tokenizers.trainers.WordPieceTrainer(
        vocab_size=3000, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    )
    tk.train_from_iterator(corpus, trainer)
    bert = transformers.BertTokenizerFast(vocab=tk.get_vocab(), model_max_length=512)
    bert.save_pretrained(out)


def _corpus_dir(out: Path) -> Path:
    """vLLM's pooling tests, in the source tree unpacked beside the models."""
    return next(out.parent.glob("vllm-*/tests/entrypoints/pooling"))


def _bert_config(num_labels: int = 2) -> object:
    import transformers

    # hidden 768: the bi-encoder tests check bge-base's embedding size
    return transformers.BertConfig(
        vocab_size=3000, hidden_size=768, intermediate_size=1024, num_hidden_layers=2,
        num_attention_heads=12, max_position_embeddings=512, num_labels=num_labels,
    )  # fmt: skip


def cross_encoder(out: Path) -> None:
    """A random BERT cross-encoder (one label: /score and /rerank)."""
    import torch
    import transformers

    _wordpiece(out)
    torch.manual_seed(0)
    cfg = _bert_config(num_labels=1)
    transformers.BertForSequenceClassification(cfg).save_pretrained(out)


def bi_encoder(out: Path) -> None:
    """A random BERT embedder in sentence-transformers' layout (CLS pooling, normalized,
    as bge): /score and /rerank by cosine."""
    import torch
    import transformers

    _wordpiece(out)
    torch.manual_seed(0)
    transformers.BertModel(_bert_config()).save_pretrained(out)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize",
         "type": "sentence_transformers.models.Normalize"},
    ]  # fmt: skip
    (out / "modules.json").write_text(json.dumps(modules, indent=2))
    (out / "1_Pooling").mkdir(exist_ok=True)
    (out / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": 768, "pooling_mode_cls_token": True})
    )
    (out / "2_Normalize").mkdir(exist_ok=True)
    (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 512}))


def _word_bpe(out: Path) -> int:
    """A byte-level BPE trained on vLLM's pooling tests until each word of theirs is one
    token (their token counts are checked, as with the real tokenizers); returns its size.
    transformers builds Qwen2's own tokenizer class from this file for a qwen2 config."""
    import tokenizers
    import transformers

    corpus = [p.read_text() for p in sorted(_corpus_dir(out).rglob("*.py"))]
    tk = tokenizers.Tokenizer(tokenizers.models.BPE())
    tk.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=20000, special_tokens=["<|endoftext|>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    tk.train_from_iterator(corpus, trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
        model_max_length=4096,
    )  # fmt: skip
    fast.save_pretrained(out)
    return len(fast)


def _qwen2_config(vocab_size: int, num_labels: int) -> object:
    import transformers

    return transformers.Qwen2Config(
        vocab_size=vocab_size, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
        num_labels=num_labels, pad_token_id=0, tie_word_embeddings=False,
    )  # fmt: skip


def qwen2_classifier(out: Path) -> None:
    """A random Qwen2 sequence classifier with two labels (as apeach):
    ``--pooler-config.task token_classify`` runs its score head on every token."""
    import torch
    import transformers

    cfg = _qwen2_config(_word_bpe(out), num_labels=2)
    torch.manual_seed(0)
    transformers.Qwen2ForSequenceClassification(cfg).save_pretrained(out)


def qwen2_reward(out: Path) -> None:
    """A random Qwen2 reward model (vLLM's ``Qwen2ForRewardModel``: a reward per token from
    a two-layer head, ``score.0`` and ``score.2``); internlm2's reward model needs remote
    code."""
    import safetensors.torch
    import torch
    import transformers

    cfg = _qwen2_config(_word_bpe(out), num_labels=1)
    cfg.architectures = ["Qwen2ForRewardModel"]
    torch.manual_seed(0)
    weights = dict(transformers.Qwen2Model(cfg).state_dict())
    weights = {f"model.{k}": v.contiguous() for k, v in weights.items()}
    h = cfg.hidden_size
    head = {"score.0.weight": (h, h), "score.0.bias": (h,), "score.2.weight": (1, h),
            "score.2.bias": (1,)}  # fmt: skip
    weights |= {k: torch.randn(shape) * 0.02 for k, shape in head.items()}
    cfg.save_pretrained(out)
    safetensors.torch.save_file(weights, out / "model.safetensors", metadata={"format": "pt"})


def opt(out: Path) -> None:
    """A random OPT (head_dim 64; learned positions, as facebook/opt-125m) with the demo's
    byte-level BPE: the prompt-embeds tests, whose reference runner embeds the prompt with
    this model's own input embeddings."""
    import torch
    import transformers

    tok = transformers.PreTrainedTokenizerFast.from_pretrained(DEMO_TOKENIZER)
    tok.save_pretrained(out)
    cfg = transformers.OPTConfig(
        vocab_size=len(tok), hidden_size=128, ffn_dim=256, num_hidden_layers=2,
        num_attention_heads=2, word_embed_proj_dim=128, max_position_embeddings=2048,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.OPTForCausalLM(cfg).save_pretrained(out)


def colbert(out: Path) -> None:
    """A random ColBERT in answerai-colbert-small-v1's layout: ``HF_ColBERT`` (a BERT saved
    as ``bert.*``) plus ``linear.weight``, a bias-free projection to 96 dims (the
    checkpoint's only trace of that width: vLLM reads it from the weight's shape)."""
    import safetensors.torch
    import torch
    import transformers

    _wordpiece(out)
    cfg = _bert_config()
    cfg.architectures = ["HF_ColBERT"]
    torch.manual_seed(0)
    bert = transformers.BertModel(cfg, add_pooling_layer=False)
    weights = {f"bert.{k}": v.contiguous() for k, v in bert.state_dict().items()}
    weights["linear.weight"] = torch.randn(96, cfg.hidden_size) * 0.02
    cfg.save_pretrained(out)
    safetensors.torch.save_file(weights, out / "model.safetensors", metadata={"format": "pt"})


# The modules a LoRA adapter adapts, per model type (attention and MLP projections, as the
# hub adapters of vLLM's tests do).
LORA_TARGETS = {
    "opt": ["q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"],
    "default": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}


def lora(model: Path, out: Path, seed: int, rank: int = 8) -> None:
    """A random peft LoRA adapter (rank ``rank``, alpha 2 * rank) for the model in ``model``,
    in peft's file layout (``adapter_config.json``, ``adapter_model.safetensors`` with
    ``base_model.model.<module>.lora_A/B.weight``). B is not zero (peft initializes it so)
    so that the adapter changes outputs; ``seed`` tells two adapters apart."""
    import safetensors.torch
    import torch
    import transformers

    cfg = transformers.AutoConfig.from_pretrained(model)
    targets = LORA_TARGETS.get(cfg.model_type, LORA_TARGETS["default"])
    with torch.device("meta"):
        base = transformers.AutoModelForCausalLM.from_config(cfg)
    gen = torch.Generator().manual_seed(seed)
    weights = {}
    for name, module in base.named_modules():
        if isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1] in targets:
            d_out, d_in = module.weight.shape
            a = torch.randn(rank, d_in, generator=gen) / d_in**0.5
            b = torch.randn(d_out, rank, generator=gen) / rank**0.5
            weights[f"base_model.model.{name}.lora_A.weight"] = a
            weights[f"base_model.model.{name}.lora_B.weight"] = b
    config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": str(model),
        "r": rank, "lora_alpha": 2 * rank, "lora_dropout": 0.0, "bias": "none",
        "target_modules": targets, "fan_in_fan_out": False, "use_dora": False,
        "use_rslora": False, "init_lora_weights": True, "modules_to_save": None,
        "inference_mode": True,
    }  # fmt: skip
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2))
    safetensors.torch.save_file(
        weights, out / "adapter_model.safetensors", metadata={"format": "pt"}
    )


def build_lora(model: Path, seed: int, cache: Path) -> Path:
    """The directory of a LoRA adapter for ``model`` (built once under ``cache``)."""
    out = cache / f"lora-{model.name.removeprefix('model-')}-{seed}"
    if not (out / ".done").exists():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        lora(model, out, seed)
        (out / ".done").touch()
    return out


def tiny_mixtral(out: Path) -> None:
    """A random Mixtral as TitanML/tiny-mixtral is shaped (2 layers, 8 local experts, 2
    per token; head_dim 64, as vLLM's CPU attention needs >= 32) with the demo tokenizer:
    the routed-experts tests."""
    import torch
    import transformers

    tok = transformers.PreTrainedTokenizerFast.from_pretrained(DEMO_TOKENIZER)
    tok.save_pretrained(out)
    cfg = transformers.MixtralConfig(
        vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=64, num_local_experts=8,
        num_experts_per_tok=2, max_position_embeddings=4096, sliding_window=None,
        tie_word_embeddings=False, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.MixtralForCausalLM(cfg).save_pretrained(out)


def build(builder: Callable[[Path], None], cache: Path) -> Path:
    """The directory of ``builder``'s model under ``cache`` (built once)."""
    out = cache / f"model-{builder.__name__.replace('_', '-')}"
    if not (out / ".done").exists():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        builder(out)
        (out / ".done").touch()
    return out
