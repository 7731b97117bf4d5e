"""The kernel's tool layer: plain Python functions become tools that any env (or plugin) exposes.

A tool's life in an episode, and the module that handles each step:

- **announce** (``calls``): tool specs go into the system prompt inside ``<tools></tools>``
  (``with_tools``/``render_tools_prompt``), as in the Nemotron-Cascade-2 chat template; no
  server-side tool parser is involved.
- **parse** (``calls``): calls come back in the model's text, by default as
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``; other formats register in
  ``tool_parsers``. Broken calls are reported, never raised.
- **describe** (``schema``, ``docstrings``): ``Tool.from_function``/``@tool`` derive the name,
  description and JSON schema from a function's signature, type hints and docstring; a task row's
  own specs can replace them (``Toolbox.with_specs``).
- **validate** (``validation``): arguments are checked against the schema with a dependency-free
  JSON-Schema subset; each problem names the argument.
- **dispatch** (``toolbox``): ``Toolbox.acall`` runs a call (sync inline, async under a timeout)
  and turns every mistake the policy can make into a readable ``"Error: ..."`` tool message.
- **hidden arguments**: parameters such as a database handle or a workspace are listed in
  ``hidden``; they never appear in the schema, the policy cannot pass them, and the env supplies
  them per episode through ``acall``'s ``context``.
- **a turn** (``toolbox``): ``Toolbox.aturn`` answers one model reply: it skips a reply cut at the
  length limit, splits off the reasoning, parses the calls, ends the episode when there are none,
  runs at most ``max_calls`` with the hidden context, and counts calls and errors (``ToolTurn``).

Example::

    @tool(hidden=["db"])
    def search_emails(query: str, page: int = 1, *, db: Database) -> list[dict]:
        '''Search the inbox.

        Args:
            query: words that must all appear in the email.
            page: page of results, from 1.
        '''

    toolbox = Toolbox([search_emails])
    messages = with_tools(messages, toolbox.specs())
    ...
    async def aturn(self, episode, completion):  # the env's answer to each model turn
        tools = await toolbox.aturn(completion, {"db": episode.state}, max_calls=8, parser=self.tool_parser)
        return Turn(tools.messages, done=tools.ended, info=tools.info)
"""

from .calls import (
    DEFAULT_TOOL_PARSER,
    ParsedToolCalls,
    ToolCall,
    ToolParser,
    normalise_tool,
    parse_xml_json_tool_calls,
    render_tools_prompt,
    tool_parsers,
    with_tools,
)
from .schema import schema_from_function, type_schema
from .toolbox import Tool, Toolbox, ToolError, ToolResult, ToolTurn, render_result, tool
from .validation import validate_arguments

__all__ = [
    "DEFAULT_TOOL_PARSER",
    "ParsedToolCalls",
    "Tool",
    "ToolCall",
    "ToolError",
    "ToolParser",
    "ToolResult",
    "ToolTurn",
    "Toolbox",
    "normalise_tool",
    "parse_xml_json_tool_calls",
    "render_result",
    "render_tools_prompt",
    "schema_from_function",
    "tool",
    "tool_parsers",
    "type_schema",
    "validate_arguments",
    "with_tools",
]
