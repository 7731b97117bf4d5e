"""``cascade/Code-v0``: competitive programming with a strict binary reward.

The answer's last fenced code block (Python 3, or C++ compiled with ``g++ -O2 -std=c++17``) must
pass every test of the task — stdin/stdout, function-call (LeetCode-style) or checker-judged — to
earn 1. It reads the public code RL rows unchanged (NeMo Gym ``code_gen`` layout, see ``task.py``);
rows with IOI-style ``subtasks`` earn the fraction of the points of the subtasks passed (``subtasks.py``).
Tests run in a sandbox here, on a verification service when ``verifier_url`` is given
(``cascade-envs serve-sandbox``), or on Ray actors when ``ray_actors`` is given. A row's tests are
parsed once, when it loads (``CodeProblem``).
"""

from __future__ import annotations

from typing import Any

from ...core import Reward, Row
from ...data import Prompt
from ...env import Env
from ...sandbox import Sandbox
from .client import VerifierClient
from .judge import Judge, JudgeConfig
from .ray_verifier import RayVerifier
from .task import CodeProblem, parse_code_task, public_problem


class CodeEnv(Env[CodeProblem]):
    """Code generation graded by execution.

    ``sandbox``: a backend name or instance (default: ``bwrap``; where it does not work the env
    refuses at construction with one line naming the fix — it never falls back to a weaker backend
    unless one is named, e.g. ``sandbox="local"``);
    ``verifier_url``: score on remote verification services instead (``cascade-envs serve-sandbox``; a
    list or comma-separated URLs spreads the load, least-busy first);
    ``ray_actors``: score on a pool of Ray actors (0: one per CPU of the Ray cluster); ``time_limit_s`` (CPU
    seconds), ``memory_mb`` (per test), ``total_time_s`` (per response) and ``stop_at_first_failure``
    set the judge's defaults, which a task's own limits override; ``max_concurrency`` bounds the
    responses judged at once here (default: one per core).
    """

    default_tasks = "bundled:code/samples.jsonl"

    def __init__(
        self,
        tasks: Any = None,
        *,
        sandbox: str | Sandbox | None = None,
        verifier_url: str | list[str] | None = None,
        verifier_timeout_s: float = 600.0,
        ray_actors: int | None = None,
        time_limit_s: float = 5.0,
        memory_mb: int = 1024,
        total_time_s: float = 120.0,
        stop_at_first_failure: bool = True,
        max_concurrency: int = 0,
        **kwargs: Any,
    ):
        super().__init__(tasks, **kwargs)
        config = JudgeConfig(
            time_limit_s=time_limit_s,
            memory_mb=memory_mb,
            total_time_s=total_time_s,
            stop_at_first_failure=stop_at_first_failure,
            max_concurrency=max_concurrency,
        )
        if verifier_url and ray_actors is not None:
            raise ValueError("pass verifier_url= (HTTP service) or ray_actors= (Ray actors), not both")
        if ray_actors is not None and sandbox is not None and not isinstance(sandbox, str):
            raise ValueError(
                "ray_actors= builds each actor's sandbox from its name: pass sandbox='docker' (or another "
                f"backend name), not a {type(sandbox).__name__} instance"
            )
        # Run-wide resources, owned by this env (it serves every episode of a run) and closed by aclose.
        self.judge = Judge(sandbox, config)
        self.client: Any = None
        if verifier_url:
            self.client = VerifierClient(verifier_url, timeout_s=verifier_timeout_s, config=config)
        elif ray_actors is not None:
            settings = {
                "sandbox": sandbox,
                "time_limit_s": time_limit_s,
                "memory_mb": memory_mb,
                "total_time_s": total_time_s,
                "stop_at_first_failure": stop_at_first_failure,
            }
            self.client = RayVerifier(type(self), ray_actors, settings)
        else:  # choose the backend now: without a usable one this raises (one line naming the fix)
            _ = self.judge.sandbox

    def load_task(self, row: Row) -> CodeProblem:
        prompt = Prompt.of(row)
        tests = parse_code_task(row)
        return CodeProblem(prompt, tests, row["verifier_metadata"], public_problem(prompt, row))

    async def acheck(self, task: CodeProblem, answer: str) -> Reward | None:
        """The answer on the row's ``public_tests`` (never the hidden ones); ``None`` without them."""
        return None if task.public is None else await self.ascore(task.public, answer)

    async def ascore(self, task: CodeProblem, answer: str) -> Reward:
        if self.client is not None:
            return await self.client.verify(task, answer)
        return await self.judge.ascore(task.tests, answer)

    async def aclose(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            await client.aclose()
        await super().aclose()
