"""OpenHands' terminal, file-editor and finish tools, announced as the SDK defines them and run in our sandbox.

What comes from the OpenHands SDK (``openhands-sdk``/``openhands-tools``, Python >= 3.12): each
tool's name, description and JSON schema exactly as an OpenHands agent announces them
(``ToolDefinition.to_openai_tool()``, with the ``summary`` field the agent adds to every tool), the
validation of a call's arguments into the SDK's ``Action`` models, and the text of each
observation (``TerminalObservation``/``FileEditorObservation``'s ``to_llm_content``: working
directory and exit-code lines, error header, the SDK's 30,000-character output cut).

What does not: the SDK's executors. ``TerminalExecutor`` drives tmux on the host and
``FileEditorExecutor`` edits the host's disk; an RL rollout must keep model commands off the host
and run thousands of episodes in one event loop. So commands run through the workspace session
of the sandbox layer (``terminal.py``) and edits through its agent (``editor.py``). The SDK is
imported lazily (it is slow to import and absent on Python 3.11); a missing SDK is one line
naming the fix.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

from cascade_envs.core import CascadeError
from cascade_envs.sandbox import Session
from cascade_envs.tools import Tool, Toolbox, ToolError

from .editor import Editor
from .terminal import MAX_COMMAND_CHARS, Shell

SDK_MISSING = (
    "cascade/SWE-v0 needs the OpenHands SDK (openhands-sdk, openhands-tools), which needs Python >= 3.12: "
    "on Python >= 3.12, pip install 'cascade-envs[swe]'"
)
HIDDEN = ("ws",)


class WorkspaceTools:
    """One episode's tool state: its session, shell, editor, and whether ``finish`` was called."""

    def __init__(
        self,
        sdk: OpenHandsSDK,
        session: Session,
        root: str,
        *,
        default_timeout_s: float,
        max_timeout_s: float,
    ):
        self.sdk, self.session, self.root = sdk, session, root
        self.shell = Shell(root)
        self.editor = Editor(session, root)
        self.default_timeout_s, self.max_timeout_s = default_timeout_s, max_timeout_s
        self.finished: str | None = None
        self.errors = 0

    async def terminal(self, arguments: dict[str, Any]) -> str:
        action = self.sdk.action("terminal", arguments)
        if action.reset:
            if action.is_input:
                return self.failed_terminal("reset cannot be combined with is_input=True", action.command)
            self.shell.reset()
            return self.sdk.terminal_text(
                "Terminal session has been reset. All previous environment variables "
                "and session state have been cleared.",
                action.command,
                0,
                self.root,
            )
        if action.is_input:
            return self.failed_terminal(
                "no command is running: in this workspace every command runs to completion "
                "(or its timeout), so there is nothing to send input to",
                action.command,
            )
        if not action.command.strip():
            return self.failed_terminal(
                "no command given (the previous command has already finished)", action.command
            )
        if len(action.command) > MAX_COMMAND_CHARS:
            return self.failed_terminal(
                f"the command is {len(action.command)} characters long; at most "
                f"{MAX_COMMAND_CHARS} are accepted (write a script with file_editor)",
                "",
            )
        timeout = min(float(action.timeout or self.default_timeout_s), self.max_timeout_s)
        outcome = await self.shell.run(self.session, action.command, max(timeout, 1.0))
        text = outcome.output + (f"\n[{outcome.note}]" if outcome.note else "")
        return self.sdk.terminal_text(
            text, action.command, outcome.exit_code, outcome.cwd, timeout=outcome.timed_out
        )

    def failed_terminal(self, message: str, command: str) -> str:
        self.errors += 1
        return self.sdk.terminal_text(message, command, 1, self.shell.cwd or self.root, error=True)

    async def file_editor(self, arguments: dict[str, Any]) -> str:
        action = self.sdk.action("file_editor", arguments)
        editor = self.editor
        try:
            if action.command == "view":
                text = await editor.view(action.path, action.view_range)
            elif action.command == "create":
                text = await editor.create(action.path, action.file_text)
            elif action.command == "str_replace":
                text = await editor.str_replace(action.path, action.old_str, action.new_str)
            elif action.command == "insert":
                text = await editor.insert(action.path, action.insert_line, action.new_str)
            else:
                text = await editor.undo_edit(action.path)
        except ToolError as exc:
            self.errors += 1
            return self.sdk.editor_text(str(exc), action.command, action.path, error=True)
        return self.sdk.editor_text(text, action.command, action.path)

    def finish(self, arguments: dict[str, Any]) -> str:
        action = self.sdk.action("finish", arguments)
        self.finished = action.message
        return action.message


async def terminal(
    command: str,
    is_input: bool = False,
    timeout: float | None = None,
    reset: bool = False,
    summary: str | None = None,
    *,
    ws: WorkspaceTools,
) -> str:
    """Run a shell command in the workspace (the SDK's description replaces this one)."""
    return await ws.terminal({"command": command, "is_input": is_input, "timeout": timeout, "reset": reset})


async def file_editor(
    command: str,
    path: str,
    file_text: str | None = None,
    old_str: str | None = None,
    new_str: str | None = None,
    insert_line: int | None = None,
    view_range: list[int] | None = None,
    summary: str | None = None,
    *,
    ws: WorkspaceTools,
) -> str:
    """View, create and edit files in the workspace (the SDK's description replaces this one)."""
    arguments = {
        "command": command,
        "path": path,
        "file_text": file_text,
        "old_str": old_str,
        "new_str": new_str,
        "insert_line": insert_line,
        "view_range": view_range,
    }
    return await ws.file_editor({k: v for k, v in arguments.items() if v is not None})


def finish(message: str, summary: str | None = None, *, ws: WorkspaceTools) -> str:
    """End the episode (the SDK's description replaces this one)."""
    return ws.finish({"message": message})


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "terminal": terminal,
    "file_editor": file_editor,
    "finish": finish,
}


class OpenHandsSDK:
    """The SDK's tool definitions (specs, action models, observation rendering); import it lazily."""

    def __init__(self) -> None:
        # Offline and quiet: litellm (imported by the SDK) would fetch its model price map at import time.
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        os.environ.setdefault("OPENHANDS_SUPPRESS_BANNER", "1")
        try:
            finish_module = importlib.import_module("openhands.sdk.tool.builtins.finish")
            editor_module = importlib.import_module("openhands.tools.file_editor.definition")
            terminal_module = importlib.import_module("openhands.tools.terminal.definition")
            descriptions = importlib.import_module("openhands.tools.terminal.descriptions")
            metadata = importlib.import_module("openhands.tools.terminal.metadata")
        except ImportError as exc:
            raise CascadeError(f"{SDK_MISSING} ({exc})") from None
        from pydantic import ValidationError

        self._validation_error = ValidationError
        self._terminal_observation = terminal_module.TerminalObservation
        self._editor_observation = editor_module.FileEditorObservation
        self._metadata = metadata.CmdOutputMetadata
        self.definitions = {
            "terminal": terminal_module.TerminalTool(
                action_type=terminal_module.TerminalAction,
                observation_type=self._terminal_observation,
                description=descriptions.UNIX_TOOL_DESCRIPTION,
            ),
            "file_editor": editor_module.FileEditorTool(
                action_type=editor_module.FileEditorAction,
                observation_type=self._editor_observation,
                description=editor_module.TOOL_DESCRIPTION,
            ),
            "finish": finish_module.FinishTool.create()[0],
        }

    def specs(self, workdir: str) -> list[dict]:
        """The Chat-Completions specs an OpenHands agent announces (the editor's names the working dir, as there)."""
        specs = []
        for name, definition in self.definitions.items():
            spec = dict(definition.to_openai_tool())
            function = dict(spec["function"])
            if name == "file_editor":
                function["description"] += (
                    f"\n\nYour current working directory is: {workdir}\nWhen exploring project "
                    "structure, start with this directory instead of the root filesystem."
                )
            spec["function"] = function
            specs.append(spec)
        return specs

    def toolbox(self, workdir: str, *, max_result_chars: int, timeout_s: float) -> Toolbox:
        """Our tool functions, announced and checked with the SDK's specs; ``ws`` is injected per episode."""
        base = Toolbox(
            [Tool.from_function(fn, hidden=HIDDEN) for fn in FUNCTIONS.values()],
            max_result_chars=max_result_chars,
            timeout_s=timeout_s,
        )
        return base.with_specs(self.specs(workdir))

    def action(self, name: str, arguments: dict[str, Any]) -> Any:
        """The SDK's ``Action`` for a call (its own checks, e.g. ``insert_line >= 0``); ``ToolError`` if invalid."""
        try:
            return self.definitions[name].action_from_arguments(arguments)
        except self._validation_error as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors()
            )
            raise ToolError(f"invalid arguments for {name}: {problems}") from None

    def terminal_text(
        self, text: str, command: str, exit_code: int, cwd: str, *, timeout: bool = False, error: bool = False
    ) -> str:
        metadata = self._metadata(exit_code=exit_code, working_dir=cwd)
        observation = self._terminal_observation.from_text(
            text, is_error=error, command=command, exit_code=exit_code, timeout=timeout, metadata=metadata
        )
        return _joined(observation)

    def editor_text(self, text: str, command: str, path: str, *, error: bool = False) -> str:
        return _joined(self._editor_observation.from_text(text, is_error=error, command=command, path=path))


def _joined(observation: Any) -> str:
    return "".join(part.text for part in observation.to_llm_content if hasattr(part, "text"))
