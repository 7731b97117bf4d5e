"""``nemo-gym/Resources-v0``: any NeMo Gym resources server, played as a cascade env.

Rows are NeMo Gym's JSONL rows: ``responses_create_params`` (``input``: the prompt messages, with
``instructions`` as a system message when given; ``tools``: the function tools the model may call)
and any task fields the server reads. The whole row is sent to ``/seed_session`` and ``/verify``,
as NeMo Gym's agents send it. The server is one of:

- ``url``: a resources server that is already running;
- ``server`` (with ``python``, an interpreter that has ``nemo-gym``): one of NeMo Gym's resources
  servers (``resources_servers/<server>``, e.g. ``mcqa``), started here on a free local port with
  ``server_config`` as its instance config, and stopped when the env closes;
- ``command``: any other server command, started likewise (``{port}`` in it is filled in), e.g.
  ``cascade-envs serve --protocol nemo-gym cascade/MCQA-v0 --port {port}``.

An episode: ``reset`` seeds a server session with the row (its cookie is kept for the episode) and
observes the row's messages, its tools announced in the system prompt in cascade's text mode. Each
model turn's ``<tool_call>`` blocks (outside the reasoning; at most ``max_calls_per_turn``) go to
``POST /<tool>`` with their arguments, and the answers come back as tool messages (an error status
as ``Error: HTTP ...``, a ``{"output": X}`` answer as ``X``); a call of a tool the row does not
offer, or that does not parse, is an ``Error:`` message with no request. A turn with no call is the
final answer. The episode is then scored through the kernel's one scoring path (the overlong and
no-answer rules first): ``POST /verify`` with the row and a Responses ``response`` of every turn
(reasoning, text, function calls and their outputs). An episode cut at ``max_turns`` (or at the
runner's budget or deadline) is verified as it stands, as NeMo Gym's agents do at ``max_steps``;
one whose generation was cut at the length limit scores the overlong 0 without the server. The
reward is the verify answer's ``reward``; its ``reward_components`` and the numeric fields the
verifier added to the request go into the reward's components, so they reach ``info["reward"]``
and the run's metrics. A session that was not verified (overlong, no answer) is verified when the
episode ends, as that is when NeMo Gym's servers free a session's state; that answer is unused.

Faults: every request has a deadline (``timeout_s``). A ``/seed_session`` that fails is an error of
``reset`` (the runner masks the episode with it). A ``/verify`` that fails (no answer, an error
status, an answer without a finite ``reward``, or a sample the server masked), or a tool call with
no answer, is weighed against a control: a fresh session of the same row, verified with a fixed
answer no model wrote (``client.CONTROL_ANSWER``). When the server verifies the control, the fault
is the episode's own and it scores 0 with the reason (a model's output never turns a 0 into a
mask); when the control fails too, the sample is masked with both reasons (a dead, erroring or
garbled server never yields a silent 0). ``components["nemo_gym_fault"]`` says which it was.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...core import CascadeError, Completion, Message, Reward, Row, TaskError
from ...data import Prompt, prompt_messages
from ...env import Env
from ...episode import Episode, Turn
from ...reasoning import split_reasoning
from ...tools import ToolCall, normalise_tool
from .client import ResourcesClient, ServerFault, Session
from .launch import START_TIMEOUT_S, ServerProcess, nemo_gym_server
from .responses import FunctionCall, response_object, turn_items
from .server import RESERVED, TOOL_ROUTE

MAX_TURNS = 8
MAX_CALLS_PER_TURN = 32
TIMEOUT_S = 120.0
"""Default deadline of one request (a verifier may call a judge)."""


@dataclass(frozen=True)
class ResourcesTask:
    """A row: its ``prompt`` (messages and tool specs), the names of its tools, and the row as given."""

    prompt: Prompt
    tools: frozenset[str]
    row: Row


@dataclass
class TurnRecord:
    """One model turn as the server will see it: reasoning, visible text, calls run with their raw outputs."""

    reasoning: str
    text: str
    calls: list[tuple[FunctionCall, str]] = field(default_factory=list)


@dataclass
class ResourcesEpisode:
    """An episode's server session, its turns, and whether the session was verified or failed."""

    session: Session
    turns: list[TurnRecord] = field(default_factory=list)
    verified: bool = False
    fault: bool = False


class NemoGymEnv(Env[ResourcesTask]):
    """A NeMo Gym resources server as an env; see the module docstring.

    ``timeout_s``: deadline of each request; ``retries``: further attempts of a ``/seed_session`` or
    ``/verify`` with no answer or a 5xx (0: a server that writes state is never asked twice);
    ``max_result_chars``: the longest tool output the model reads (longer ones are cut, saying so);
    ``start_timeout_s``: wait for a started server to answer.
    """

    max_turns = MAX_TURNS

    def __init__(
        self,
        tasks: Any = None,
        *,
        url: str | None = None,
        server: str | None = None,
        python: str | None = None,
        server_config: Mapping[str, Any] | None = None,
        command: str | Sequence[str] | None = None,
        timeout_s: float = TIMEOUT_S,
        retries: int = 0,
        max_calls_per_turn: int = MAX_CALLS_PER_TURN,
        max_result_chars: int = 20_000,
        start_timeout_s: float = START_TIMEOUT_S,
        **kwargs: Any,
    ):
        if sum(x is not None for x in (url, server, command)) != 1:
            raise CascadeError(
                "nemo-gym/Resources-v0 needs one of url= (a running resources server), server= (a NeMo "
                "Gym resources server to start, with python=) or command= (a server command to start)"
            )
        if max_calls_per_turn < 1 or max_result_chars < 1:
            raise ValueError("max_calls_per_turn and max_result_chars must be at least 1")
        self.max_calls_per_turn, self.max_result_chars = int(max_calls_per_turn), int(max_result_chars)
        super().__init__(tasks, **kwargs)
        self.process: ServerProcess | None = None
        if server is not None:
            argv, env = nemo_gym_server(python or sys.executable, server, server_config)
            self.process = ServerProcess(argv, env=env, start_timeout_s=start_timeout_s)
        elif command is not None:
            self.process = ServerProcess(command, start_timeout_s=start_timeout_s)
        self.url = self.process.url if self.process is not None else str(url)
        try:
            self.client = ResourcesClient(self.url, timeout_s=timeout_s, retries=retries)
        except BaseException:
            if self.process is not None:
                self.process.stop()
            raise

    # ----- rows ---------------------------------------------------------------------------------

    def load_task(self, row: Row) -> ResourcesTask:
        params = row.get("responses_create_params")
        if not isinstance(params, dict) or "input" not in params:
            raise TaskError("expected an object with 'input' (a NeMo Gym row)", "responses_create_params")
        messages = prompt_messages({"responses_create_params": params})
        instructions = params.get("instructions")
        if isinstance(instructions, str) and instructions.strip():
            messages = _with_instructions(messages, instructions)
        specs = params.get("tools") or []
        if not isinstance(specs, list):
            raise TaskError("expected a list of tools", "responses_create_params.tools")
        names = [_tool_name(spec, i) for i, spec in enumerate(specs)]
        return ResourcesTask(Prompt(tuple(messages), tuple(specs)), frozenset(names), row)

    # ----- episodes -----------------------------------------------------------------------------

    async def on_reset(self, episode: Episode[ResourcesTask]) -> None:
        episode.state = ResourcesEpisode(await self.client.seed(episode.task.row))

    async def aturn(self, episode: Episode[ResourcesTask], completion: Completion) -> Turn:
        state: ResourcesEpisode = episode.state
        split = split_reasoning(completion)
        tools = episode.task.tools
        cut = completion.truncated and bool(tools)  # a cut reply of a tool task runs nothing
        parsed = self.parse_tool_calls(split.answer) if tools and not cut and not split.unterminated else None
        if parsed is None or not (parsed.calls or parsed.errors):
            state.turns.append(TurnRecord(split.reasoning, split.answer))
            return Turn(done=not cut)  # the final answer, or a cut reply the env truncates
        record = TurnRecord(split.reasoning, parsed.content)
        state.turns.append(record)
        messages: list[Message] = []
        failed = len(parsed.errors)
        for index, call in enumerate(parsed.calls[: self.max_calls_per_turn]):
            try:
                message, ok = await self._call(episode, record, f"call_{episode.turns}_{index}", call)
            except ServerFault as exc:
                state.fault = True
                return Turn(messages, reward=await self._blame(episode.task, str(exc)), done=True)
            messages.append(message)
            failed += not ok
        messages += [{"role": "tool", "content": f"Error: {error}"} for error in parsed.errors]
        left = len(parsed.calls) - self.max_calls_per_turn
        if left > 0:
            note = f"only the first {self.max_calls_per_turn} tool calls of a reply run; {left} more were not run"
            messages.append({"role": "tool", "content": f"Error: {note}"})
        return Turn(messages, info={"tool_calls": len(record.calls), "tool_errors": failed})

    async def _call(
        self, episode: Episode[ResourcesTask], record: TurnRecord, call_id: str, call: ToolCall
    ) -> tuple[Message, bool]:
        """One tool call's message and whether it succeeded; ``ServerFault`` when the server gave no answer."""
        tools = episode.task.tools
        if call.name not in tools:
            error = f"Error: unknown tool {call.name!r}; the tools: {', '.join(sorted(tools))}"
            return _tool_message(call_id, call.name, error), False
        output = await self.client.call_tool(episode.state.session, call.name, call.arguments)
        record.calls.append((FunctionCall(call_id, call.name, call.arguments), output.raw))
        return _tool_message(call_id, call.name, self._cut(output.shown())), output.ok

    async def on_end(self, episode: Episode[ResourcesTask]) -> None:
        """Verify a session that was not (overlong, no answer), so that the server frees its state."""
        state: ResourcesEpisode | None = episode.state
        if state is None or state.verified or state.fault:
            return
        state.verified = True
        with contextlib.suppress(ServerFault):
            await self.client.verify(state.session, episode.task.row, self._response(episode))

    # ----- rewards ------------------------------------------------------------------------------

    async def ascore_episode(self, episode: Episode[ResourcesTask], answer: str) -> Reward:
        return await self._verify(episode)

    async def atruncation_reward(self, episode: Episode[ResourcesTask], reason: str) -> Reward:
        if episode.final.truncated:
            return Reward.zero(f"truncated: {reason}")
        return await self._verify(episode, f"truncated: {reason}")

    async def _verify(self, episode: Episode[ResourcesTask], note: str | None = None) -> Reward:
        """The server's reward for the episode (``note`` opens its reason)."""
        state: ResourcesEpisode = episode.state
        state.verified = True
        try:
            verified = await self.client.verify(state.session, episode.task.row, self._response(episode))
        except ServerFault as exc:
            return await self._blame(episode.task, "; ".join(filter(None, [note, str(exc)])))
        reason = "; ".join(filter(None, [note, verified.reason])) or None
        return Reward(verified.value, dict(verified.metrics), reason=reason)

    async def _blame(self, task: ResourcesTask, fault: str) -> Reward:
        """The reward of an episode the server did not serve: 0 when it serves a control, else masked."""
        problem = await self.client.control(task.row)
        if problem is None:
            why = (
                f"{fault}; the server verified a control answer to this task, so the fault is this episode's"
            )
            return Reward.zero(why, nemo_gym_fault="episode")
        return Reward.failed(f"{fault}; the control answer failed too: {problem}", nemo_gym_fault="server")

    def _response(self, episode: Episode[ResourcesTask]) -> dict[str, Any]:
        state: ResourcesEpisode = episode.state
        output = [
            item for i, t in enumerate(state.turns) for item in turn_items(i, t.reasoning, t.text, t.calls)
        ]
        tools = list(episode.task.prompt.tools)
        return response_object(output, tools=tools, incomplete=episode.final.truncated)

    def _cut(self, text: str) -> str:
        if len(text) <= self.max_result_chars:
            return text
        return (
            f"{text[: self.max_result_chars]}\n[... {len(text) - self.max_result_chars} more characters cut]"
        )

    async def aclose(self) -> None:
        """End the episode in play, then close the client and stop a server started here."""
        try:
            await super().aclose()
            await self.client.aclose()
        finally:
            if self.process is not None:
                self.process.stop()


def _with_instructions(messages: list[Message], instructions: str) -> list[Message]:
    if messages and messages[0]["role"] == "system":
        return [{"role": "system", "content": f"{instructions}\n\n{messages[0]['content']}"}, *messages[1:]]
    return [{"role": "system", "content": instructions}, *messages]


def _tool_name(spec: Any, index: int) -> str:
    where = f"responses_create_params.tools[{index}]"
    if not isinstance(spec, dict) or spec.get("type", "function") != "function":
        raise TaskError("only function tools are supported", where)
    try:
        name = normalise_tool(spec)["function"]["name"]
    except ValueError as exc:
        raise TaskError(str(exc), where) from None
    if not TOOL_ROUTE.fullmatch(f"/{name}") or name in RESERVED:
        raise TaskError(f"tool name {name!r} is not a resources-server route", where)
    return name


def _tool_message(call_id: str, name: str, content: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}
