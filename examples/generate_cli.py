"""Offline generation with the engine's flags on the command line, the way vLLM's
``examples/offline_inference/basic/generate.py`` is written.

python examples/generate_cli.py                                   # the embedded demo model
python examples/generate_cli.py --model /path/to/model --max_model_len 1024 --max-tokens 32
python examples/generate_cli.py --config launch.yaml              # flag: value entries

Every engine flag of ``actorllm serve`` is accepted (``--help`` lists them); the parsed
namespace goes to ``LLM`` whole.
"""

from actorllm import LLM, EngineArgs
from actorllm.utils.argparse_utils import FlexibleArgumentParser


def create_parser() -> FlexibleArgumentParser:
    parser = FlexibleArgumentParser()
    EngineArgs.add_cli_args(parser)
    sampling = parser.add_argument_group("Sampling parameters")
    sampling.add_argument("--max-tokens", type=int)
    sampling.add_argument("--temperature", type=float)
    sampling.add_argument("--top-p", type=float)
    sampling.add_argument("--top-k", type=int)
    return parser


def main(args: dict) -> None:
    overrides = {k: args.pop(k) for k in ("max_tokens", "temperature", "top_p", "top_k")}
    llm = LLM(**args)
    sampling_params = llm.get_default_sampling_params()
    for name, value in overrides.items():
        if value is not None:
            setattr(sampling_params, name, value)
    prompts = ["Hello, my name is", "The capital of France is", "The future of AI is"]
    for output in llm.generate(prompts, sampling_params):
        print(f"Prompt: {output.prompt!r}, Generated text: {output.outputs[0].text!r}")


if __name__ == "__main__":
    main(vars(create_parser().parse_args()))
