"""``cascade/Workplace-v0``: multi-turn tool use over a simulated workplace, scored by the state it leaves.

The workplace (WorkBench's five data sets and company directory, ``tables.py``) is fresh for each
episode. Each model turn's ``<tool_call>`` blocks run against it through the 27 tools and come
back as tool messages; the episode ends when the model replies without a tool call, or is cut at
``max_turns`` (default 6: NeMo Gym's ``max_steps`` for workplace_assistant). Rows: ``task.py``.

Turns (the kernel's ``Toolbox.aturn``): calls inside the ``<think>`` part are not run; a reply cut
at the length limit runs none. At most ``max_calls_per_turn`` calls of one reply run, in order; the
rest are not run and one error message says so (with their names, bounded), so a reply with 500
calls costs a bounded turn. A malformed ``<tool_call>`` block, an unknown tool or bad arguments
get an ``Error: ...`` tool message, as a real tool would answer, and the episode goes on; an
argument given as ``null`` is one not given (NeMo Gym's server drops them).

Reward (NeMo Gym's outcome rule): the ground-truth calls run on a fresh copy of the tables and
the final states are compared under ``compare.py``'s normalisation; 1 when equal, else 0 with the
first differences as the reason. Read-only calls never change it. Beyond NeMo Gym:

- a finished episode needs a final reply with visible text after the reasoning (the kernel's
  no-answer rule): an empty or invisible reply never earns 1;
- a question task (a row with ``expected_answer``, ``answer.py``) also needs its answer in that
  reply, and no listed distractor: 1 only when the state is the expected one *and* the answer is
  found, else 0 with a reason naming which failed. Without it a task that writes nothing would pay
  any reply that changes nothing. NeMo Gym's rows have no such field and keep its state-only rule.

Episodes cut before a final reply:

- at the turn limit, the token budget, the deadline or a context overflow: scored on the state,
  as NeMo Gym scores an episode that ran out of ``max_steps``, when the task needs writes and
  asks no question; a task answered in the reply (its ground truth writes nothing, or it has an
  ``expected_answer``) earns 0 with no reply;
- when the generation was cut at the length limit: 0 (the overlong rule of DESIGN.md).

A ground-truth call that fails on the configured tables rejects the row when the env loads its
tasks (``on_bad_rows`` decides whether that raises or skips it), naming the file, line and id.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

from cascade_envs import Env, Reward, Row, TaskError
from cascade_envs.core import Completion, Message
from cascade_envs.episode import Episode, Turn

from .compare import compare
from .tables import Workplace
from .task import AnnouncedTools, WorkplaceTask, read_task
from .toolset import make_toolbox, replay

MAX_TURNS = 6
"""NeMo Gym's ``max_steps`` for workplace_assistant (configs/workplace_assistant.yaml)."""
MAX_CALLS_PER_TURN = 32


@dataclass
class WorkplaceEpisode:
    """The state of one episode: its task, its own workplace, the tools it announces, call counts."""

    task: WorkplaceTask
    workplace: Workplace
    calls: int = 0
    errors: int = 0


class WorkplaceEnv(Env[WorkplaceTask]):
    """Tool use over a simulated workplace, rewarded when the final state is the expected one.

    ``tables``: a tables folder (default: the bundled one, ``data/tables``) or a loaded
    ``Workplace`` template. ``max_calls_per_turn``: calls of one reply that run (see the module
    docstring). ``max_result_chars``: longest tool message (longer ones are cut, saying so).
    """

    default_tasks: ClassVar[str | None] = "bundled:workplace/tasks.jsonl"
    max_turns = MAX_TURNS

    def __init__(
        self,
        tasks: Any = None,
        *,
        tables: str | os.PathLike[str] | Workplace | None = None,
        max_calls_per_turn: int = MAX_CALLS_PER_TURN,
        max_result_chars: int = 20_000,
        **kwargs: Any,
    ):
        if max_calls_per_turn < 1:
            raise ValueError("max_calls_per_turn must be at least 1")
        self.max_calls_per_turn = int(max_calls_per_turn)
        self.workplace = (
            tables if isinstance(tables, Workplace) else Workplace.load(tables or bundled_tables())
        )
        self.toolbox = make_toolbox(max_result_chars=max_result_chars)
        self.tools = AnnouncedTools(self.toolbox)
        super().__init__(tasks, **kwargs)

    # ----- rows ---------------------------------------------------------------------------------

    def load_task(self, row: Row) -> WorkplaceTask:
        """Check the row (``task.py``) and that its ground truth runs on this env's tables."""
        task = read_task(row, self.tools)
        self._expected(task)
        return task

    def prompt(self, task: WorkplaceTask) -> list[Message]:
        """``Env.prompt`` of the row's messages, with the tools the task announces (its own specs or ours)."""
        return self.tools.announce(super().prompt(task), task.toolbox, task.specs)

    def _expected(self, task: WorkplaceTask) -> Workplace:
        """A fresh workplace after the ground truth; ``TaskError`` if a call of it fails."""
        workplace = self.workplace.fresh(task.now)
        for index, result in enumerate(replay(task.toolbox, workplace, task.calls)):
            if not result.ok:
                raise TaskError(
                    f"ground_truth[{index}] ({result.call.name}) fails on the tables in "
                    f"{self.workplace.folder}: {result.error}",
                    "ground_truth",
                )
        return workplace

    # ----- episodes -----------------------------------------------------------------------------

    async def on_reset(self, episode: Episode[WorkplaceTask]) -> None:
        task = episode.task
        episode.state = WorkplaceEpisode(task, self.workplace.fresh(task.now))

    async def on_end(self, episode: Episode) -> None:
        episode.state = None

    async def aturn(self, episode: Episode[WorkplaceTask], completion: Completion) -> Turn:
        state: WorkplaceEpisode = episode.state
        tools = await episode.task.toolbox.aturn(
            completion, {"db": state.workplace}, max_calls=self.max_calls_per_turn, parser=self.tool_parser
        )
        state.calls += tools.calls
        state.errors += tools.errors
        return Turn(tools.messages, done=tools.ended, info=tools.info)

    # ----- rewards ------------------------------------------------------------------------------

    async def ascore_episode(self, episode: Episode, answer: str) -> Reward:
        state: WorkplaceEpisode | None = episode.state
        if state is None:
            return Reward.failed("the episode's workplace was released before it was scored")
        return self._outcome(state, answer=answer)

    async def atruncation_reward(self, episode: Episode, reason: str) -> Reward:
        state: WorkplaceEpisode | None = episode.state
        if state is None:
            return Reward.failed(f"truncated ({reason}) after the episode's workplace was released")
        if episode.final.truncated:
            return Reward.zero(f"truncated: {reason}", **_counts(state))
        if not state.task.writes or state.task.answer is not None:
            return Reward.zero(
                f"truncated: {reason}; the task is answered in the final reply, and none came",
                **_counts(state),
            )
        return self._outcome(state, f"truncated: {reason}; ")

    def _outcome(self, state: WorkplaceEpisode, prefix: str = "", answer: str = "") -> Reward:
        """1 when the state is the expected one and, for a question task, ``answer`` states its answer."""
        try:
            expected = self._expected(state.task)
        except TaskError as exc:  # the row loaded, so the tables or the row changed since
            return Reward.failed(f"the ground truth no longer runs: {exc}")
        verdict = compare(expected.snapshot(), state.workplace.snapshot())
        info: dict[str, Any] = {
            **_counts(state),
            "differences": list(verdict.differences),
            "tables": list(verdict.tables),
        }
        reasons, passed = [verdict.reason], verdict.equal
        if state.task.answer is not None:
            found, why = state.task.answer.check(answer)
            info["answer_found"] = int(found)
            reasons.append(why)
            passed = passed and found
        if passed:
            return Reward(1.0, info, reason=prefix + "; ".join(reasons))
        return Reward.zero(prefix + "; ".join(reasons), **info)


def bundled_tables() -> Path:
    """The tables folder shipped with the package (``envs/workplace/data/tables``)."""
    return Path(str(resources.files("cascade_envs.envs.workplace").joinpath("data", "tables")))


def _counts(state: WorkplaceEpisode) -> dict[str, int]:
    return {"tool_calls": state.calls, "tool_errors": state.errors, "expected_writes": state.task.writes}
