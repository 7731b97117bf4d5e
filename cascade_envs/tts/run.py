"""Running a strategy over an env's tasks into a resumable results JSONL (``cascade-envs solve``).

The results file holds one ``config`` line (the arguments), then, as they happen, an ``attempt``
line per model call (``Attempt.to_row``: its own prompt and reply, round, role, verdict, reward)
and an ``outcome`` line per task (``TaskOutcome.to_row``), each with the task's ``index`` in the
env's task list. A rerun with the same arguments resumes (``cascade_envs.resume``, as ``filter``):
tasks with an outcome are kept, the others (never finished, or cut short by the budget) are solved
again and their partial lines dropped; other arguments are refused unless ``force``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..core import CascadeError, Reward
from ..data import Loaded
from ..defaults import DEFAULT_CONCURRENCY
from ..resume import changed, read_objects, write_atomic
from .base import Attempt, SolveContext, TaskOutcome, get_strategy

COMPARED = ("env", "tasks", "env_kwargs", "strategy", "settings", "policy", "verifier", "judge", "sampling")
"""The arguments a resumed run must share with the run that wrote the file."""


class SolveError(CascadeError):
    """Bad solve arguments, or a results file written with other arguments."""


@dataclass
class SolveSummary:
    """The outcome rows of every finished task (this run's and earlier ones'), summed up."""

    outcomes: list[dict[str, Any]]
    solved_this_run: int = 0
    not_started: int = 0
    budget: str | None = None
    elapsed_s: float = 0.0
    results: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        rows = self.outcomes
        rewards = [r["reward"] for r in rows if r["reward"] is not None]
        scored = [r["value"] for r in rewards if not r["masked"]]
        masked = Counter(str(r.get("error") or "masked")[:200] for r in rewards if r["masked"])
        oracle = [r["pass_at_n"] for r in rows if r["pass_at_n"] is not None]
        judged = [r["selector_correct"] for r in rows if r["selector_correct"] is not None]
        notes = Counter(n for r in rows for n in r["notes"] if not n.startswith(("selected ", "accepted ")))
        return {
            "tasks": len(rows),
            "selected_score": sum(scored) / len(scored) if scored else None,
            "scored": len(scored),
            "no_answer_submitted": sum(r["reward"] is None for r in rows),
            "pass_at_n": sum(oracle) / len(oracle) if oracle else None,
            "selector_accuracy": sum(judged) / len(judged) if judged else None,
            "generations": sum(r["generations"] for r in rows),
            "rounds": sum(r["rounds"] for r in rows),
            "masked": sum(masked.values()),
            "masked_reasons": dict(masked.most_common(5)),
            "notes": dict(notes.most_common(8)),
            "solved_this_run": self.solved_this_run,
            "not_started": self.not_started,
            "budget": self.budget,
            "elapsed_s": round(self.elapsed_s, 2),
            "results": None if self.results is None else str(self.results),
        }

    def text(self) -> str:
        d = self.to_dict()

        def pct(x: float | None) -> str:
            return "n/a" if x is None else f"{x:.3f}"

        lines = [
            f"tasks {d['tasks']}: selected score {pct(d['selected_score'])} over {d['scored']} scored, "
            f"pass@N {pct(d['pass_at_n'])}, selector accuracy {pct(d['selector_accuracy'])} "
            "(selected correct when any candidate was)",
            f"generations {d['generations']}, rounds {d['rounds']}, this run {d['solved_this_run']} task(s) "
            f"in {d['elapsed_s']} s",
        ]
        if d["masked"]:
            reasons = "; ".join(f"{n}x {why}" for why, n in d["masked_reasons"].items())
            lines.append(f"masked (not scored, not 0): {d['masked']}: {reasons}")
        if d["no_answer_submitted"]:
            lines.append(f"tasks with no answer submitted: {d['no_answer_submitted']}")
        for note, n in d["notes"].items():
            lines.append(f"note ({n}x): {note}")
        if d["budget"]:
            lines.append(f"{d['budget']}: {d['not_started']} task(s) not finished; rerun to continue")
        if d["results"]:
            lines.append(f"results: {d['results']}")
        return "\n".join(lines)


@dataclass
class SolveJob:
    """The strategy named ``strategy`` over ``tasks`` (``Loaded`` items of one env) into ``path``.

    ``config`` names what the run is made with (compared on resume); ``open`` needs no model, and
    ``arun(ctx)`` solves what is pending, ``ctx`` being the template of every task's context (env,
    policy, judge, settings, one shared budget).
    """

    strategy: str
    tasks: list[Loaded[Any]]
    path: Path
    config: dict[str, Any]
    done: dict[tuple[int, str], dict[str, Any]] = field(default_factory=dict)

    def open(self, force: bool = False) -> SolveJob:
        """Check the results file against ``config`` (``force``: start over) and load finished tasks."""
        get_strategy(self.strategy)
        config = {
            "kind": "config",
            "strategy": self.strategy,
            **json.loads(json.dumps(self.config, default=str)),
        }
        rows = [] if force else list(read_objects(self.path))
        saved = next((r for r in rows if r.get("kind") == "config"), None)
        if rows and saved is None:
            raise SolveError(f"{self.path} is not a results file of `solve`; use another -o, or --force")
        if saved is not None and (differ := changed(saved, config, COMPARED)):
            raise SolveError(
                f"{self.path} was written with other arguments ({'; '.join(differ)}); "
                "use another -o, or --force to start over"
            )
        self.done = {
            (r["index"], r["task_id"]): r
            for r in rows
            if r.get("kind") == "outcome" and not r.get("cut_short") and "index" in r
        }
        kept = [config] + [
            r
            for r in rows
            if r.get("kind") in ("attempt", "outcome") and (r.get("index"), r.get("task_id")) in self.done
        ]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept))
        return self

    @property
    def pending(self) -> list[tuple[int, Loaded[Any]]]:
        return [(i, t) for i, t in enumerate(self.tasks) if (i, t.task_id) not in self.done]

    async def arun(
        self,
        ctx: SolveContext,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        task_timeout_s: float | None = None,
        progress: bool = False,
    ) -> SolveSummary:
        """Solve the pending tasks, ``concurrency`` at a time, writing each line as it comes.

        ``task_timeout_s`` bounds one task's strategy: past it the task's outcome is a masked
        reward saying so (its attempts so far are kept), and it is not solved again on resume.
        """
        from ..rollout.runner import _progress_bar

        if ctx.strategy != self.strategy:
            raise SolveError(f"the context is for {ctx.strategy!r}, this job runs {self.strategy!r}")
        started = time.monotonic()
        strategy = get_strategy(self.strategy)
        pending = self.pending
        queue = iter(pending)
        budget = ctx.budget
        solved = 0
        bar = _progress_bar(len(pending), progress)
        with self.path.open("a", encoding="utf-8") as out:

            async def worker() -> None:
                nonlocal solved
                for index, task in queue:  # one iterator shared by the workers: each task taken once
                    if budget.spent:
                        return
                    task_ctx = dataclasses.replace(ctx, record=_writer(out, index), cut_short=None)
                    try:
                        outcome = await asyncio.wait_for(strategy(task_ctx, task), task_timeout_s)
                    except TimeoutError:
                        error = f"the task took more than {task_timeout_s:g} s (--episode-timeout)"
                        outcome = TaskOutcome(
                            task.task_id, ctx.env_id, ctx.strategy, None, Reward.failed(error), notes=[error]
                        )
                    row = {**outcome.to_row(), "index": index, "cut_short": task_ctx.cut_short}
                    _write(out, row)
                    if not task_ctx.cut_short:
                        self.done[(index, task.task_id)] = row
                    solved += 1
                    bar.update(1)

            workers = [asyncio.ensure_future(worker()) for _ in range(max(1, min(concurrency, len(pending))))]
            try:
                await asyncio.gather(*workers)
            finally:
                for w in workers:
                    w.cancel()
                await asyncio.gather(*workers, return_exceptions=True)
                bar.close()
        return self.summary(solved, time.monotonic() - started, budget.spent_reason)

    def summary(self, solved: int = 0, elapsed_s: float = 0.0, budget: str | None = None) -> SolveSummary:
        """The summary of every finished task in the file; ``budget``: why this run stopped early."""
        left = len(self.pending)
        rows = [self.done[key] for key in sorted(self.done)]
        return SolveSummary(rows, solved, left, budget if left else None, elapsed_s, self.path)


def _write(out: IO[str], row: dict[str, Any]) -> None:
    out.write(json.dumps(row, ensure_ascii=False) + "\n")
    out.flush()


def _writer(out: IO[str], index: int) -> Any:
    def record(attempt: Attempt) -> None:
        _write(out, {**attempt.to_row(), "index": index})

    return record
