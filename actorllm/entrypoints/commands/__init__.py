"""Subcommands of the ``actorllm`` CLI (registered in ``actorllm.entrypoints.cli.COMMANDS``)."""
