"""Difficulty filtering: ``k`` rollouts per prompt; drop prompts solved k/k, keep a seeded share of 0/k.

A rollout is *solved* when its reward is scored (not masked) and ``>= solved_threshold`` (default
1.0: full credit). Per prompt, with ``s`` solved of ``n`` scored rollouts, the outcome is

- ``dropped_solved``: ``s == n == k`` (too easy);
- ``kept`` / ``dropped_unsolved``: ``s == 0 == n - k``: kept when the prompt's seeded draw (a hash of
  the seed and the row's id, or of its content when it has none) falls under ``keep_unsolved``, so
  the choice never depends on order, batching or resumes; default 1.0 keeps every unsolved prompt
  (the code-RL curation: only k/k prompts go); the SWE curation keeps 0.1 of them;
- ``kept``: any other complete prompt;
- ``incomplete``: fewer than ``k`` rollouts scored (a dead judge, a policy or sandbox failure: masked
  rewards are not 0s); recorded with the reasons, neither kept nor dropped, retried by the next run;
- ``bad_row``: the env cannot load the row (the error is recorded; the other rows go on).

Files in the output folder: ``filter.json`` (the arguments; a rerun with other ones is refused
unless ``force``, which starts over), ``outcomes.jsonl`` (one line per prompt, appended and flushed
per prompt, so a killed run resumes where it stopped), ``rollouts.jsonl`` (every rollout played),
``kept.jsonl`` (the kept rows byte for byte, in input order; ``kept.parquet`` for a Parquet input),
``histogram.txt`` and ``summary.json``, rewritten from the outcomes at the end of every run.

Rollouts are sampled without a seed: a seed shared by the ``k`` requests would make seeded engines
return ``k`` identical samples. ``seed`` seeds only the keep draw.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .core import CascadeError, Reward
from .data import read_rows, resolve_path, row_id, task_id, validate_row
from .defaults import DEFAULT_CONCURRENCY
from .env import Env, run_sync
from .policy import Policy, SamplingParams
from .resume import changed, read_objects, sha256, write_atomic

OUTCOMES = ("kept", "dropped_solved", "dropped_unsolved", "incomplete", "bad_row")
CONFIG_FILE, OUTCOMES_FILE, ROLLOUTS_FILE = "filter.json", "outcomes.jsonl", "rollouts.jsonl"
HISTOGRAM_FILE, SUMMARY_FILE = "histogram.txt", "summary.json"
COMPARED = (
    "env",
    "env_kwargs",
    "tasks_sha256",
    "k",
    "solved_threshold",
    "keep_unsolved",
    "seed",
    "policy",
    "sampling",
)
"""The arguments a resumed run must share with the run that made the folder."""
MAX_REASONS, MAX_REASON_CHARS = 3, 300


class FilterError(CascadeError):
    """Bad filter arguments, or an output folder made with other arguments."""


@dataclass(frozen=True)
class FilterSettings:
    """What decides an outcome: rollouts per prompt, the solved threshold, the unsolved share kept, its seed."""

    k: int = 8
    keep_unsolved: float = 1.0
    solved_threshold: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise FilterError(f"k must be a positive integer, got {self.k!r}")
        if not isinstance(self.keep_unsolved, (int, float)) or not 0.0 <= self.keep_unsolved <= 1.0:
            raise FilterError(f"keep_unsolved must be a fraction in [0, 1], got {self.keep_unsolved!r}")
        if (
            not isinstance(self.solved_threshold, (int, float))
            or self.solved_threshold != self.solved_threshold
        ):
            raise FilterError(f"solved_threshold must be a number, got {self.solved_threshold!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise FilterError(f"seed must be an integer, got {self.seed!r}")


def keeps_unsolved(identity: str, settings: FilterSettings) -> bool:
    """The seeded draw of an unsolved prompt: True for about ``keep_unsolved`` of all identities."""
    digest = hashlib.sha256(f"{settings.seed}\0{identity}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < settings.keep_unsolved


@dataclass
class Outcome:
    """One prompt's line in ``outcomes.jsonl``; ``row`` is its line (JSONL) or row (Parquet) number, from 1."""

    row: int
    id: str | None
    k: int
    scored: int
    solved: int
    outcome: str
    reasons: list[str] = field(default_factory=list)

    @property
    def pass_rate(self) -> float | None:
        return self.solved / self.scored if self.scored else None

    def to_dict(self) -> dict[str, Any]:
        rate = self.pass_rate
        return {**asdict(self), "pass_rate": None if rate is None else round(rate, 6)}


def decide(
    row: int, identity: str, row_id: str | None, rewards: Sequence[Reward], settings: FilterSettings
) -> Outcome:
    """The outcome of a prompt from the rewards of its rollouts."""
    scored = [r for r in rewards if not r.masked]
    solved = sum(r.value >= settings.solved_threshold for r in scored)
    outcome = Outcome(row, row_id, settings.k, len(scored), solved, "kept", [f"solved {solved}/{settings.k}"])
    if len(scored) < settings.k:
        errors = Counter(
            " ".join(str(r.error or r.reason or "masked").split())[:MAX_REASON_CHARS]
            for r in rewards
            if r.masked
        )
        outcome.outcome = "incomplete"
        outcome.reasons = [f"{n}x {error}" for error, n in errors.most_common(MAX_REASONS)]
        outcome.reasons.insert(0, f"{len(scored)} of {settings.k} rollouts scored; retried on the next run")
    elif solved == settings.k:
        outcome.outcome = "dropped_solved"
    elif solved == 0:
        kept = keeps_unsolved(identity, settings)
        outcome.outcome = "kept" if kept else "dropped_unsolved"
        outcome.reasons[0] += (
            f"; {'kept' if kept else 'dropped'} by the seeded draw (keep_unsolved={settings.keep_unsolved:g})"
        )
    return outcome


def histogram(outcomes: Sequence[Outcome], k: int) -> list[int]:
    """Counts of complete prompts by solved rollouts, index 0..k."""
    counts = [0] * (k + 1)
    for o in outcomes:
        if o.outcome in ("kept", "dropped_solved", "dropped_unsolved") and o.scored == k:
            counts[o.solved] += 1
    return counts


def format_histogram(counts: Sequence[int], width: int = 40) -> str:
    """One line per bucket ``s/k``: the pass rate, a bar scaled to the largest bucket, the count."""
    k, top = len(counts) - 1, max(max(counts), 1)
    lines = [f"pass rate over {sum(counts)} complete prompt(s), k={k}"]
    digits = len(str(k))
    for s, n in enumerate(counts):
        bar = "#" * round(width * n / top)
        lines.append(f"{s:>{digits}}/{k}  {s / k:4.2f} |{bar:<{width}}| {n}")
    return "\n".join(lines)


@dataclass
class FilterSummary:
    """What a run left in its folder: outcome counts, the histogram, where the kept rows are."""

    out_dir: Path
    counts: dict[str, int]
    histogram: list[int]
    kept_path: Path
    played: int = 0
    elapsed_s: float = 0.0

    @property
    def complete(self) -> bool:
        return self.counts["incomplete"] == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompts": sum(self.counts.values()),
            **self.counts,
            "played_this_run": self.played,
            "histogram": {f"{s}/{len(self.histogram) - 1}": n for s, n in enumerate(self.histogram)},
            "kept_rows": str(self.kept_path),
            "out_dir": str(self.out_dir),
            "elapsed_s": round(self.elapsed_s, 2),
        }


class FilterJob:
    """One filtering run over ``tasks`` for ``env_id`` into ``out_dir``; see the module docstring.

    ``open()`` checks the arguments against the folder and loads earlier outcomes (cheap: no model,
    no env); ``pending`` then lists the rows still to play; ``arun(policy)`` plays them and writes
    the outputs. ``policy_id`` names the policy in ``filter.json`` (a different one is refused).
    """

    def __init__(
        self,
        env_id: str,
        tasks: str | os.PathLike[str],
        out_dir: str | os.PathLike[str],
        settings: FilterSettings | None = None,
        *,
        env_kwargs: dict[str, Any] | None = None,
        sampling: SamplingParams | None = None,
        policy_id: str | None = None,
    ):
        self.env_id, self.tasks, self.out_dir = env_id, os.fspath(tasks), Path(out_dir)
        self.settings = settings or FilterSettings()
        self.env_kwargs = dict(env_kwargs or {})
        if "tasks" in self.env_kwargs:
            raise FilterError("env_kwargs: 'tasks' is not allowed here; the task file is the tasks argument")
        self.sampling = sampling or SamplingParams()
        if self.sampling.seed is not None:
            raise FilterError(
                "sampling.seed must be None: a shared seed makes the k rollouts of a prompt identical"
            )
        self.policy_id = policy_id
        self.path = resolve_path(self.tasks)
        self.done: dict[int, Outcome] = {}
        self.pending: list[tuple[int, Any]] = []

    def config(self) -> dict[str, Any]:
        s = self.sampling
        return {
            "env": self.env_id,
            "env_kwargs": self.env_kwargs,
            "tasks": self.tasks,
            "tasks_sha256": sha256(self.path),
            **asdict(self.settings),
            "policy": self.policy_id,
            "sampling": {"max_tokens": s.max_tokens, "temperature": s.temperature, "top_p": s.top_p},
        }

    def open(self, force: bool = False) -> FilterJob:
        """Check ``out_dir`` against these arguments (``force``: start over) and list the pending rows."""
        config = json.loads(json.dumps(self.config(), default=str))
        saved_path = self.out_dir / CONFIG_FILE
        outputs = [
            self.out_dir / n
            for n in (CONFIG_FILE, OUTCOMES_FILE, ROLLOUTS_FILE, HISTOGRAM_FILE, SUMMARY_FILE)
        ]
        if force:
            for path in [*outputs, self._kept_path()]:
                path.unlink(missing_ok=True)
        elif saved_path.exists() or (self.out_dir / OUTCOMES_FILE).exists():
            differ = changed(_read_json(saved_path), config, COMPARED)
            if differ:
                raise FilterError(
                    f"{self.out_dir} was made with other arguments ({'; '.join(differ)}); "
                    "use another output folder, or --force to start over"
                )
        self.out_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(saved_path, json.dumps(config, indent=2) + "\n")
        self.done = {
            o.row: o for o in read_outcomes(self.out_dir / OUTCOMES_FILE) if o.outcome != "incomplete"
        }
        self._rewrite_outcomes()  # drops incomplete lines and any line a kill cut short
        self.pending = [(line, row) for line, row in read_rows(self.path) if line not in self.done]
        return self

    async def arun(
        self,
        policy: Policy,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        episode_timeout_s: float | None = None,
        progress: bool = False,
    ) -> FilterSummary:
        """Play every pending row ``k`` times, record each outcome as it is decided, then write the outputs."""
        from .registry import make
        from .rollout.runner import RolloutRunner, _progress_bar

        loop = asyncio.get_running_loop()
        started, played = loop.time(), 0
        if self.pending:
            env = make(self.env_id, **{**self.env_kwargs, "tasks": []})
            if not isinstance(env, Env):
                raise FilterError(
                    f"{self.env_id} is a {type(env).__name__}, not a cascade_envs.Env: it cannot be played"
                )
            runner = RolloutRunner(
                policy,
                sampling=self.sampling,
                group_size=self.settings.k,
                concurrency=concurrency,
                envs={self.env_id: env},
                episode_timeout_s=episode_timeout_s,
            )
            bar = _progress_bar(len(self.pending), progress)
            queue = iter(self.pending)
            with (
                (self.out_dir / OUTCOMES_FILE).open("a", encoding="utf-8") as outcomes,
                (self.out_dir / ROLLOUTS_FILE).open("a", encoding="utf-8") as rollouts,
            ):

                async def worker() -> None:
                    nonlocal played
                    for line, row in queue:  # one iterator shared by the workers: each row is taken once
                        outcome = await self._play(runner, env, line, row, rollouts)
                        played += outcome.outcome != "bad_row"
                        outcomes.write(json.dumps(outcome.to_dict(), ensure_ascii=False) + "\n")
                        outcomes.flush()
                        if outcome.outcome != "incomplete":
                            self.done[line] = outcome
                        bar.update(1)

                workers = [
                    asyncio.ensure_future(worker()) for _ in range(max(1, concurrency // self.settings.k))
                ]
                try:
                    await asyncio.gather(*workers)
                finally:  # one worker's failure (or an interrupt) stops the others before the env closes
                    for task in workers:
                        task.cancel()
                    await asyncio.gather(*workers, return_exceptions=True)
                    bar.close()
                    await runner.aclose()
                    await env.aclose()
        return self.finish(played, loop.time() - started)

    def run(self, policy: Policy, **kwargs: Any) -> FilterSummary:
        return run_sync(self.arun(policy, **kwargs))

    async def _play(self, runner: Any, env: Env, line: int, row: Any, rollouts: Any) -> Outcome:
        rid = row_id(row)
        loaded, error = validate_row(row, env.load)
        if loaded is None:
            return Outcome(line, rid, self.settings.k, 0, 0, "bad_row", [f"{self.tasks}:{line}: {error}"])
        (group,) = await runner.arun([(self.env_id, loaded)])
        rollouts.write(
            "".join(
                json.dumps({"row": line, **e.to_dict()}, ensure_ascii=False) + "\n" for e in group.episodes
            )
        )
        rollouts.flush()
        return decide(line, task_id(row), rid, [e.reward for e in group.episodes], self.settings)

    def finish(self, played: int = 0, elapsed_s: float = 0.0) -> FilterSummary:
        """Rewrite the outputs from the outcomes: the kept rows, the histogram, the summary."""
        self._rewrite_outcomes()
        incomplete = [o for o in read_outcomes(self.out_dir / OUTCOMES_FILE) if o.outcome == "incomplete"]
        finished = sorted(self.done.values(), key=lambda o: o.row)
        counts = Counter(o.outcome for o in [*finished, *incomplete])
        kept_path = self._kept_path()
        _write_kept(self.path, kept_path, {o.row for o in finished if o.outcome == "kept"})
        summary = FilterSummary(
            self.out_dir,
            {name: counts.get(name, 0) for name in OUTCOMES},
            histogram(finished, self.settings.k),
            kept_path,
            played,
            elapsed_s,
        )
        write_atomic(self.out_dir / HISTOGRAM_FILE, format_histogram(summary.histogram) + "\n")
        write_atomic(self.out_dir / SUMMARY_FILE, json.dumps(summary.to_dict(), indent=2) + "\n")
        return summary

    def _rewrite_outcomes(self) -> None:
        """``outcomes.jsonl`` in input order, one line per prompt: its latest outcome."""
        path = self.out_dir / OUTCOMES_FILE
        latest = {o.row: o for o in read_outcomes(path)}
        latest.update(self.done)
        lines = [json.dumps(o.to_dict(), ensure_ascii=False) + "\n" for _, o in sorted(latest.items())]
        write_atomic(path, "".join(lines))

    def _kept_path(self) -> Path:
        return self.out_dir / ("kept.parquet" if self.path.suffix == ".parquet" else "kept.jsonl")


def filter_tasks(
    policy: Policy,
    env_id: str,
    tasks: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    settings: FilterSettings | None = None,
    *,
    force: bool = False,
    env_kwargs: dict[str, Any] | None = None,
    sampling: SamplingParams | None = None,
    policy_id: str | None = None,
    **run_kwargs: Any,
) -> FilterSummary:
    """Filter ``tasks`` in one call (sync); ``run_kwargs`` go to ``FilterJob.arun``."""
    job = FilterJob(
        env_id, tasks, out_dir, settings, env_kwargs=env_kwargs, sampling=sampling, policy_id=policy_id
    )
    return job.open(force).run(policy, **run_kwargs)


def read_outcomes(path: Path) -> list[Outcome]:
    """The outcomes recorded in ``path`` (a line a kill cut short is skipped: that prompt is played again)."""
    found: list[Outcome] = []
    for data in read_objects(path):
        try:
            found.append(
                Outcome(**{k: data[k] for k in ("row", "id", "k", "scored", "solved", "outcome", "reasons")})
            )
        except (KeyError, TypeError):
            continue
    return found


def _write_kept(source: Path, target: Path, rows: set[int]) -> None:
    """The kept rows as they are in ``source``: its raw lines (JSONL), or its rows and schema (Parquet)."""
    tmp = target.with_name(target.name + ".tmp")
    if source.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pq.read_table(source)
        pq.write_table(table.take(pa.array(sorted(r - 1 for r in rows), type=pa.int64())), tmp)
    else:
        with source.open("rb") as fh, tmp.open("wb") as out:
            for number, raw in enumerate(fh, start=1):  # numbered as ``read_rows`` numbers them
                if number in rows:
                    out.write(raw if raw.endswith(b"\n") else raw + b"\n")
    os.replace(tmp, target)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise FilterError(
            f"{path} is missing or unreadable ({exc}); use another output folder, or --force"
        ) from None
    return data if isinstance(data, dict) else {}
