"""A tool call parser plugin: ``actorllm serve ... --tool-parser-plugin
examples/tool_parser_plugin.py --tool-call-parser call_line``.

The model writes ``CALL name {json arguments}`` on its own line after any content.
"""

from actorllm.entrypoints.openai.tool_parsers import register_tool_parser
from actorllm.entrypoints.openai.tool_parsers.base import Parsed, PartialCall, ToolParser
from actorllm.entrypoints.openai.tool_parsers.json_scan import loads_object


@register_tool_parser("call_line")
class CallLineParser(ToolParser):
    markers = ("CALL ",)  # content ending in a prefix of this is held back while streaming

    def parse(self, text: str, final: bool) -> Parsed:
        head, sep, call = text.partition("CALL ")
        if not sep:
            return Parsed(content=text)
        name, space, args = call.partition(" ")
        if not space:  # the name is still being written
            return Parsed(content=head, calls=[PartialCall(name=None, arguments="")])
        complete = loads_object(args.strip()) is not None
        if final and not complete:
            return Parsed(content=text)  # not a call after all
        arguments = args.strip() if complete else args.lstrip()
        return Parsed(content=head, calls=[PartialCall(name, arguments, complete)])
