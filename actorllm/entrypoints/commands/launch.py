"""``actorllm launch COMPONENT``: vLLM's launchers of single server components.

``launch render MODEL``: vLLM's GPU-less render server. It serves the scale-out API's
render and derender routes (``/v1/chat/completions/render``, ``/v1/completions/render``,
``/v1/messages/render``, ``/v1/responses/render``, the two ``.../derender``), the
tokenizer's routes, ``/v1/models`` and the operations routes, from the model's config.json
and tokenizer alone: no weights, no engine. A front end renders requests into token ids
here, sends them to a server's ``/inference/v1/generate`` (``actorllm serve
--tokens-only`` or ``--enable-scale-out``), and turns the token ids back into OpenAI
answers here. It takes ``serve``'s flags, as vLLM's does; those that only shape an engine
have nothing to act on:

    $ actorllm launch render Qwen/Qwen3-0.6B --port 8100 --reasoning-parser qwen3
"""

from __future__ import annotations

import argparse
import logging

import msgspec

from actorllm.entrypoints.commands import serve

HELP = "launch one server component: `launch render` (vLLM's GPU-less render server)"
logger = logging.getLogger("actorllm.server")

RENDER_HELP = "a render-only server: requests to token ids and back, without an engine"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    components = parser.add_subparsers(dest="launch_component", required=True, metavar="COMPONENT")
    render = components.add_parser(
        "render", help=RENDER_HELP, description=RENDER_HELP, allow_abbrev=False
    )
    serve.add_arguments(render)


def run(args: argparse.Namespace) -> int:
    # the only component (argparse refused any other)
    return run_render(args)


def run_render(args: argparse.Namespace) -> int:
    try:
        settings = serve.server_settings(args)
        app = settings.app
        if app.lora_modules:
            raise ValueError("--lora-modules: a render-only server loads no LoRA adapters.")
        if "dev_mode" in vars(args):
            raise ValueError("--dev-mode: a render-only server has no engine for the dev routes.")
        if app.dev_mode:  # from the environment, which may be set for other servers too
            logger.warning(
                "dev mode is set in the environment; a render-only server has no dev routes."
            )
        app = msgspec.structs.replace(app, render_only=True, dev_mode=False)
        settings = msgspec.structs.replace(settings, app=app)
        config = serve.engine_config(args)
    except ValueError as exc:
        logger.error("invalid configuration: %s", serve.describe_error(exc))
        return 2
    from actorllm.entrypoints.scale_out.render_only import RenderOnlyEngine
    from actorllm.entrypoints.server import run_server

    return run_server(lambda: RenderOnlyEngine.open(config), settings)
