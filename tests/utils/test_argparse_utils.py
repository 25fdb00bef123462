"""``FlexibleArgumentParser`` (vLLM's ``vllm.utils.argparse_utils``): its looser spellings,
``--config``, and the namespace of ``EngineArgs.add_cli_args`` going to ``LLM`` whole."""

import sys

import pytest

from actorllm import EngineArgs
from actorllm.utils import FlexibleArgumentParser as FromUtils
from actorllm.utils.argparse_utils import FlexibleArgumentParser


def _parser() -> FlexibleArgumentParser:
    parser = FlexibleArgumentParser()
    EngineArgs.add_cli_args(parser)
    parser.add_argument("--max-tokens", type=int, default=16)
    return parser


def test_underscores_dotted_keys_and_sys_argv(monkeypatch):
    assert FromUtils is FlexibleArgumentParser
    args = _parser().parse_args(
        [
            "--max_model_len", "512", "--max_tokens", "4",
            "--structured-outputs-config.backend", "guidance",
        ]
    )  # fmt: skip
    assert (args.max_model_len, args.max_tokens) == (512, 4)
    assert args.structured_outputs_config == {"structured_outputs_backend": "guidance"}
    monkeypatch.setattr(sys, "argv", ["script.py", "--max_num_seqs", "8"])
    assert _parser().parse_args().max_num_seqs == 8  # sys.argv is rewritten too


def test_config_file_and_the_command_line_wins(tmp_path):
    cfg = tmp_path / "launch.yaml"
    cfg.write_text("max_model_len: 256\nseed: 3\nmax-num-seqs: 4\n")
    args = _parser().parse_args(["--config", str(cfg), "--seed", "7"])
    assert (args.max_model_len, args.seed, args.max_num_seqs) == (256, 7, 4)
    cfg.write_text("no_such_flag: 1\n")
    with pytest.raises(SystemExit):
        _parser().parse_args(["--config", str(cfg)])


def test_the_parsed_namespace_is_valid_engine_arguments():
    """vLLM's generate.py: ``LLM(**vars(parser.parse_args()))`` after popping its own."""
    from actorllm.engine.api.async_engine import _as_config

    values = vars(_parser().parse_args(["--max-model-len", "128", "--seed", "5"]))
    values.pop("max_tokens")
    assert values.pop("disable_log_stats") is False  # LLM's own keyword (tested with LLM)
    assert "block_size" not in values  # flags not given are not in the namespace
    config = _as_config(values.pop("model", None), values)
    assert (config.max_model_len, config.seed) == (128, 5)
