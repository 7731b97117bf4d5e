"""``cascade/SWE-v0``: an agent fixes a real repository through OpenHands' tools; its tests decide the reward.

The execution-based SWE RL stage of the Nemotron-Cascade-2 report: the policy works inside the
OpenHands scaffold (its terminal, file-editor and finish tools) for up to 200 turns in a 256K
context, in non-thinking mode, and is rewarded by running the repository's tests.

Why the OpenHands *SDK* (``openhands-sdk``, ``openhands-tools``) and not the ``openhands-ai``
application: the SDK is the library the application is built on and holds exactly what the policy
sees (each tool's name, description, JSON schema and observation text), while the application
pins hundreds of packages (a web server, a runtime image builder) and an older SDK. The SDK's
executors are not used: they run on the host (tmux, host files), and model commands here run in
the sandbox layer's workspace mode, one workspace per episode (``tools.py`` says what comes from
where). The SDK needs Python >= 3.12: on 3.11 this module imports, and making the env refuses with
one line naming the fix.

An episode:

- setup (``on_reset``): a sandbox session whose workspace holds the repository at the task's
  ``workdir`` (``/testbed``): the row's snapshot copied in (bwrap, local) or a container of the
  row's image or per-instance image (docker, ``images.py``), then its ``setup_cmd``; the
  workspace's files are listed then, before the agent acts (the base the change is read against),
  and the interpreter of the task's tests is found (``interpreter.py``: once per image);
  Anything failing here raises ``SandboxError`` from ``reset``; the runner masks such an episode
  (``Reward.failed``), it is never scored 0;
- turns: the ``<tool_call>`` blocks of each reply run in order (at most ``max_calls_per_turn``);
  broken JSON, unknown tools and bad arguments come back as error messages and the episode goes
  on. It ends when ``finish`` is called or a reply has no tool call; at ``max_turns`` (default
  200), the runner's deadline, token budget or a context overflow it ends truncated, scored 0;
- reward: after a finished episode the agent's change is read from its workspace, screened, and
  graded in a clean room, a fresh copy of the base, by the project's test runner
  (``grading.py``, ``changes.py``): 1 iff every FAIL_TO_PASS and PASS_TO_PASS test passes; a
  finished episode whose last reply shows nothing earns 0 without a test run (the kernel's rule);
  a workspace lost mid-episode (the sandbox died) masks the sample;
- cleanup (``on_end``): the session closes and its workspace is removed.

Backends: ``sandbox="bwrap"`` (default where it works) and ``"docker"`` (the row's image, or its
per-instance one: ``cascade-envs build-image swe``) keep the host, the task rows and sibling
episodes out of reach. ``"local"`` cannot (the host file system stays readable), so it is refused
unless ``allow_unsafe_local=True``; then each session gets a private tree (``sandbox/local.py``: a
capped tmpfs workspace whose host path replaces ``workdir`` in the prompt, private temp dirs, the
rest of the host read-only) and the task files and bundled rows are hidden from it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from cascade_envs import Env, Reward, Row, TaskError
from cascade_envs.core import Completion, Message
from cascade_envs.data import BUNDLED, resolve_path
from cascade_envs.episode import Episode, Turn
from cascade_envs.sandbox import Sandbox, SandboxError, Session, get_sandbox
from cascade_envs.tools import with_tools

from .changes import ChangeError, Manifest, manifest
from .grading import SETUP_TIMEOUT_S, TEST_TIMEOUT_S, grade, open_workspace
from .interpreter import Interpreters
from .task import SweTask, read_task
from .tools import OpenHandsSDK, WorkspaceTools

log = logging.getLogger("cascade_envs.envs.swe")

MAX_TURNS = 200
MAX_CALLS_PER_TURN = 16
UNSAFE_LOCAL = (
    "cascade/SWE-v0 refuses the 'local' sandbox: it cannot keep the host's files (the task rows with their "
    "gold patches) out of the agent's reach; use bwrap or docker, or pass allow_unsafe_local=True"
)
SYSTEM_PROMPT = (
    "You are a software engineer working in a code repository. Use the tools to explore the code, reproduce "
    "the problem, edit files and run commands. The environment has no network access. When the issue is "
    "resolved (or you cannot go further), call the finish tool."
)
USER_PROMPT = (
    "<uploaded_files>\n{workdir}\n</uploaded_files>\n"
    "The repository is at {workdir}. Consider the following issue:\n\n<issue_description>\n{issue}\n"
    "</issue_description>\n\nMake the minimal changes to non-test files in {workdir} so that the issue is "
    "resolved. Tests that check the fix exist already or will be added: you do not need to write them."
)


@dataclass
class SweEpisode:
    """One episode's state: its task, its tools (session, shell, editor) and the workspace's base files."""

    task: SweTask
    tools: WorkspaceTools
    base: Manifest
    calls: int = 0

    @property
    def session(self) -> Session:
        return self.tools.session

    def stop_reason(self) -> str | None:
        """Why the calls left in a reply must not run: the episode finished, or its workspace is gone."""
        if self.tools.finished is not None:
            return "the episode finished"
        return "the workspace was lost" if self.session.lost else None


class SweEnv(Env[SweTask]):
    """Repository repair through OpenHands' tools in a sandbox workspace, rewarded by the repository's tests.

    ``sandbox``: a backend name or instance (default ``bwrap``). ``command_timeout_s``: a terminal
    command's timeout when the call gives none; ``max_command_timeout_s`` caps the ones it gives.
    ``test_timeout_s``, ``setup_timeout_s``: the grading run and the setup command.
    ``max_result_chars``: the longest tool message. ``memory_mb``, ``nproc``, ``output_limit_mb``:
    per-command limits. ``allow_unsafe_local``: accept the ``local`` sandbox (see the module doc).
    ``legacy_python``: grade tasks whose interpreter is older than 3.8 (no audit hooks, so the runner's
    in-process defences are off; such a task masks without it).
    ``image_template``: the image of every row (``datasets.IMAGE_TEMPLATES``: a preset such as
    ``"swe-gym"`` or a format string over the row's fields; default: the row's own image, else its
    dataset's published name). ``python``: the interpreter of the tests when a row names none
    (default: found in the image, ``interpreter.py``). ``sandbox_options``: more settings of a
    sandbox named by ``sandbox`` (docker: ``workdir_mb``, ``container_memory_mb``: a public image's
    ``/testbed`` with its git history can outgrow the default 256 MB work dir). ``max_turns`` (200), ``episode_timeout_s`` and ``max_episode_tokens`` (``Env``;
    unset: the runner's) bound an episode; the report's 256K context is the engine's, whose
    overflow ends the episode truncated.
    """

    default_tasks: ClassVar[str | None] = "bundled:swe/tasks.jsonl"
    max_turns = MAX_TURNS
    thinking = False
    """The report trains execution-based SWE in non-thinking mode."""

    def __init__(
        self,
        tasks: Any = None,
        *,
        sandbox: str | Sandbox | None = None,
        command_timeout_s: float = 120.0,
        max_command_timeout_s: float = 600.0,
        test_timeout_s: float = TEST_TIMEOUT_S,
        setup_timeout_s: float = SETUP_TIMEOUT_S,
        max_calls_per_turn: int = MAX_CALLS_PER_TURN,
        max_result_chars: int = 30_000,
        memory_mb: int = 2048,
        nproc: int = 256,
        output_limit_mb: float = 4,
        allow_unsafe_local: bool = False,
        legacy_python: bool = False,
        image_template: str | None = None,
        python: str | None = None,
        sandbox_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ):
        if max_calls_per_turn < 1:
            raise ValueError("max_calls_per_turn must be at least 1")
        for name, value in (
            ("command_timeout_s", command_timeout_s),
            ("max_command_timeout_s", max_command_timeout_s),
            ("test_timeout_s", test_timeout_s),
            ("setup_timeout_s", setup_timeout_s),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be positive")
        self.sdk = OpenHandsSDK()  # refuses here, with the fix, where the SDK is missing
        self.sandbox = (
            get_sandbox(
                sandbox,
                timeout_s=command_timeout_s,
                memory_mb=memory_mb,
                nproc=nproc,
                output_limit_mb=output_limit_mb,
                **(sandbox_options or {}),
            )
            if not isinstance(sandbox, Sandbox)
            else sandbox
        )
        if self.sandbox.name == "local" and not allow_unsafe_local:
            raise ValueError(UNSAFE_LOCAL)
        self.command_timeout_s, self.max_command_timeout_s = (
            float(command_timeout_s),
            float(max_command_timeout_s),
        )
        self.test_timeout_s, self.setup_timeout_s = float(test_timeout_s), float(setup_timeout_s)
        self.max_calls_per_turn = int(max_calls_per_turn)
        self.max_result_chars = int(max_result_chars)
        self.legacy_python = bool(legacy_python)
        self._toolboxes: dict[str, Any] = {}
        self.image_template = image_template
        self.interpreters = Interpreters(python)
        super().__init__(tasks, **kwargs)
        self.hidden = self._hidden()

    def _hidden(self) -> tuple[str, ...]:
        """Host directories holding task rows (gold patches): hidden from every workspace."""
        folders = {str(resolve_path(f"{BUNDLED}swe/tasks.jsonl").parent)}
        name = self.tasks.name if self.tasks is not None else ""
        if name.startswith(BUNDLED) or Path(name).is_file():
            folders.add(str(resolve_path(name).resolve().parent))
        return tuple(sorted(folders))

    # ----- rows ---------------------------------------------------------------------------------

    def load_task(self, row: Row) -> SweTask:
        task = read_task(row, image_template=self.image_template)
        if task.files is None and task.source is None and self.sandbox.name != "docker":
            raise TaskError(
                f"the repository is only in the image {task.image!r}: use sandbox='docker'", "repo_snapshot"
            )
        return task

    def toolbox(self, workdir: str) -> Any:
        if workdir not in self._toolboxes:
            self._toolboxes[workdir] = self.sdk.toolbox(
                workdir, max_result_chars=self.max_result_chars, timeout_s=self.max_command_timeout_s + 60
            )
        return self._toolboxes[workdir]

    def prompt(self, task: SweTask) -> list[Message]:
        messages: list[Message] = [
            {"role": "system", "content": self.system_prompt or SYSTEM_PROMPT},
            {
                "role": "user",
                "content": USER_PROMPT.format(workdir=task.workdir, issue=task.problem_statement.strip()),
            },
        ]
        return with_tools(messages, self.toolbox(task.workdir).specs())

    # ----- episodes -----------------------------------------------------------------------------

    async def on_reset(self, episode: Episode[SweTask]) -> None:
        task = episode.task
        session = await open_workspace(
            self.sandbox, task, hidden=self.hidden, setup_timeout_s=self.setup_timeout_s
        )
        try:
            base = await manifest(session, task)
            await self.interpreters.find(session, task)  # before the agent acts; masks a bad image early
        except ChangeError as exc:
            await session.aclose()
            raise SandboxError(f"workspace setup of {task.instance_id or 'the task'} failed: {exc}") from None
        except BaseException:
            await session.aclose()
            raise
        root = session.workdir
        if root != task.workdir:  # a backend that cannot place the repository at workdir (local)
            for message in episode.messages:
                message["content"] = str(message["content"]).replace(task.workdir, root)
        tools = WorkspaceTools(
            self.sdk,
            session,
            root,
            default_timeout_s=self.command_timeout_s,
            max_timeout_s=self.max_command_timeout_s,
        )
        episode.state = SweEpisode(task, tools, base)

    async def on_end(self, episode: Episode) -> None:
        state: SweEpisode | None = episode.state
        episode.state = None
        if state is not None:
            await state.session.aclose()

    async def aturn(self, episode: Episode[SweTask], completion: Completion) -> Turn:
        state: SweEpisode = episode.state
        tools = await self.toolbox(episode.task.workdir).aturn(
            completion,
            {"ws": state.tools},
            max_calls=self.max_calls_per_turn,
            parser=self.tool_parser,
            stop=state.stop_reason,
        )
        state.calls += tools.calls
        state.tools.errors += tools.errors
        if state.session.lost:
            return Turn(
                tools.messages,
                reward=Reward.failed(f"the workspace was lost: {state.session.lost}"),
                done=True,
            )
        info = {"tool_calls": tools.calls, "tool_errors": state.tools.errors}
        return Turn(tools.messages, done=tools.ended or state.tools.finished is not None, info=info)

    # ----- rewards ------------------------------------------------------------------------------

    async def ascore_episode(self, episode: Episode, answer: str) -> Reward:
        state: SweEpisode | None = episode.state
        if state is None:
            return Reward.failed("the episode's workspace was released before it was scored")
        if state.session.lost:
            return Reward.failed(f"the workspace was lost: {state.session.lost}")
        reward = await grade(
            self.sandbox,
            state.task,
            state.session,
            state.base,
            hidden=self.hidden,
            test_timeout_s=self.test_timeout_s,
            setup_timeout_s=self.setup_timeout_s,
            legacy_python=self.legacy_python,
            interpreters=self.interpreters,
        )
        reward.components.update(self._counts(state))
        return reward

    async def atruncation_reward(self, episode: Episode, reason: str) -> Reward:
        state: SweEpisode | None = episode.state
        counts = self._counts(state) if state is not None else {}
        return Reward.zero(
            f"truncated: {reason}; the tests are run only for an episode that finished", **counts
        )

    @staticmethod
    def _counts(state: SweEpisode) -> dict[str, int]:
        return {
            "tool_calls": state.calls,
            "tool_errors": state.tools.errors,
            "turns_finished": int(state.tools.finished is not None),
        }
