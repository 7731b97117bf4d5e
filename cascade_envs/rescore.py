"""``cascade-envs rescore``: the rewards of stored episodes again, from today's verifiers and judges, with no inference.

Input: the results of ``eval``, ``solve`` or ``filter``, or NeMo Gym rollouts (``rescore_files``
reads each kind). Scoring is the env's own: each episode is played again without a model. Its env
is made as the file records it (``env_id``, ``env_kwargs``, ``judge_url`` and ``judge_timeout_s``
override), its task loaded from the recorded row (else found in the env's tasks: ``tasks``), each
stored model turn fed to ``Env.aadvance`` (tools run again, so a stateful env rebuilds its state),
an episode cut short when played cut again, and the episodes scored by ``Env.ascore_episodes``, a
group of a group-scored env together. The stored reward and mask are read for the table only,
never for the new verdict. A judge that fails masks, as in play; a record that cannot be played
again (malformed, failed before its answer, a prompt the env no longer builds) is written masked
with ``rescore.error``, and the run goes on.

Output (``out``; default ``RESULTS.rescored.jsonl``, or ``DIR-rescored/`` for a filter folder;
``in_place`` replaces the input at the end): the input's kind, each rescored record with its new
reward and a ``rescore`` entry (its input ``line``, the input's ``source`` digest, ``env``,
``before``, ``after``, ``change``, ``reason``, and ``error`` or ``note``). ``masked_only`` rescores only the
records holding a masked verdict (a group-scored env's whole group) and copies the others untouched.
Records are appended and flushed as they are scored, so a killed run loses nothing written and a
rerun skips them; the file is then rewritten in input order. Bounded: ``concurrency`` scoring units
(a record, or a group) at a time, each within ``timeout_s`` (past it: masked), every judge request
within its judge's deadline.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .core import Message, Reward
from .data import Loaded
from .env import Env, Episode, run_sync
from .filtering import CONFIG_FILE, ROLLOUTS_FILE
from .judges import JUDGE_URL_ENV, SERVE_JUDGE_URL, JudgedEnv, JudgeUnavailable
from .registry import make, spec
from .rescore_files import META, Item, RescoreError, Source, derive, read_source, written
from .resume import read_objects, sha256, write_atomic

__all__ = ["CHANGES", "RescoreError", "RescoreSummary", "arescore", "rescore"]

CHANGES = ("unchanged", "0->1", "1->0", "masked->scored", "scored->masked", "still masked", "failed")
"""What became of a rescored record (``failed``: it could not be rescored); a row not rescored is ``skipped``."""
EXAMPLES = 5


@dataclass
class RescoreSummary:
    """Rows by env and change (``CHANGES`` and ``skipped``), a few changed rows, where the output is."""

    counts: dict[str, Counter[str]]
    examples: list[str]
    out: Path

    def total(self) -> Counter[str]:
        return sum(self.counts.values(), Counter())

    def table(self) -> str:
        """One line per env and a total: rows, rescored, then each change."""
        columns = (*CHANGES, "skipped")
        lines = [["env", "rows", "rescored", *columns]] + [
            [env, *map(str, (c.total(), c.total() - c["skipped"], *(c[k] for k in columns)))]
            for env, c in [*sorted(self.counts.items()), ("total", self.total())]
        ]
        widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
        text = [
            "  ".join(
                [line[0].ljust(widths[0]), *(v.rjust(w) for v, w in zip(line[1:], widths[1:], strict=True))]
            )
            for line in lines
        ]
        legend = "0->1 / 1->0: a scored reward rose / fell; failed: not rescored (written masked, see rescore.error)"
        return "\n".join([*text, legend, *self.examples, f"results: {self.out}"])


def rescore(
    results: str | os.PathLike[str], out: str | os.PathLike[str] | None = None, **options: Any
) -> RescoreSummary:
    """``arescore`` from sync code."""
    return run_sync(arescore(results, out, **options))


async def arescore(
    results: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    in_place: bool = False,
    masked_only: bool = False,
    env_id: str | None = None,
    env_kwargs: dict[str, Any] | None = None,
    tasks: str | None = None,
    judge_url: str | None = None,
    judge_timeout_s: float | None = None,
    concurrency: int = 16,
    timeout_s: float = 600.0,
    force: bool = False,
    progress: bool = False,
) -> RescoreSummary:
    """Rescore ``results`` into ``out``; see the module docstring."""
    from .rollout.runner import _progress_bar

    if concurrency < 1 or not timeout_s > 0:
        raise RescoreError("concurrency must be at least 1 and the timeout positive")
    source = read_source(Path(results), env_id, tasks)
    out_file, out_dir = _output(source, Path(results), out, in_place)
    digest = sha256(source.path)[:16]
    done = _resume(out_file, digest, force)
    if judge_url:
        os.environ[JUDGE_URL_ENV] = judge_url  # read by judged envs given no judge_url (plugins' too)
    overrides = {"env_id": env_id, "env_kwargs": env_kwargs or {}, "tasks": tasks}
    judge = {"judge_url": judge_url, "judge_timeout_s": judge_timeout_s}
    envs: dict[str, Env | str] = {}
    try:
        units: dict[Any, list[Item]] = {}
        for item in source.items:
            env = None if item.error else _env(envs, item, overrides, judge)
            unit = (item.env_key, item.group) if env is not None and env.scores_groups else item.line
            units.setdefault(unit, []).append(item)
        todo = [
            unit
            for unit in units.values()
            if any(i.line not in done for i in unit) and (not masked_only or any(i.masked for i in unit))
        ]
        with out_file.open("a", encoding="utf-8") as fh, _progress_bar(sum(map(len, todo)), progress) as bar:
            queue = iter(todo)

            async def worker() -> None:
                for unit in queue:  # one iterator shared by the workers: each unit is taken once
                    scored = await _score_unit(unit, envs, timeout_s)
                    records = [_record(source.kind, i, scored[i.line], digest) for i in unit]
                    fh.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
                    fh.flush()
                    done.update((i.line, r) for i, r in zip(unit, records, strict=True))
                    bar.update(len(unit))

            workers = [asyncio.ensure_future(worker()) for _ in range(min(concurrency, len(todo)) or 1)]
            try:
                await asyncio.gather(*workers)
            finally:  # one worker's failure (or an interrupt) stops the others before the envs close
                for w in workers:
                    w.cancel()
                await asyncio.gather(*workers, return_exceptions=True)
    finally:
        for made in envs.values():
            if isinstance(made, Env):
                await made.aclose()
    return _finish(source, done, out_file, out_dir, Path(results) if in_place else None)


def _env(
    envs: dict[str, Env | str], item: Item, overrides: dict[str, Any], judge: dict[str, Any]
) -> Env | None:
    """The env that scores ``item``, made once per id and kwargs; ``None`` (and ``item.error``) when it cannot be made."""
    env_id = overrides["env_id"] or item.env_id
    kwargs = {**item.kwargs, **overrides["env_kwargs"]}
    if item.row is not None:
        kwargs["tasks"] = []  # the row is at hand: no task file to read
    elif overrides["tasks"]:
        kwargs["tasks"] = overrides["tasks"]
    key = json.dumps([env_id, kwargs], sort_keys=True, default=str)
    if key not in envs:
        try:
            cls = spec(env_id).load()
            if isinstance(cls, type) and issubclass(cls, JudgedEnv):
                kwargs.update({name: value for name, value in judge.items() if value})
            made = make(env_id, **kwargs)
            envs[key] = (
                made if isinstance(made, Env) else f"{env_id} is not a cascade_envs.Env: it cannot be played"
            )
        except JudgeUnavailable as exc:
            envs[key] = str(JudgeUnavailable(exc.owner, f"add --judge-url {SERVE_JUDGE_URL}"))
        except Exception as exc:
            envs[key] = f"cannot make {env_id}: {type(exc).__name__}: {exc}"
    made = envs[key]
    item.env_id, item.env_key = env_id, key
    if isinstance(made, str):
        item.error = made
        return None
    return made


async def _score_unit(
    unit: list[Item], envs: dict[str, Env | str], timeout_s: float
) -> dict[int, Reward | str]:
    """Each item's new reward, or why it could not be rescored (a ``str``)."""
    scored: dict[int, Reward | str] = {i.line: i.error for i in unit if i.error}
    live = [i for i in unit if not i.error]
    if live:
        env = envs[live[0].env_key]
        assert isinstance(env, Env)
        try:
            scored.update(await asyncio.wait_for(_play(env, live), timeout_s))
        except TimeoutError:
            scored.update({i.line: Reward.failed(f"rescoring took more than {timeout_s:g} s") for i in live})
    return scored


async def _play(env: Env, items: list[Item]) -> dict[int, Reward | str]:
    """The items (one task) played again from their stored turns and scored by the env's scoring path."""
    try:
        loaded = _loaded(env, items[0])
    except Exception as exc:
        return {i.line: f"the task does not load: {exc}" for i in items}
    scored: dict[int, Reward | str] = {}
    played: list[tuple[Item, Episode]] = []
    try:
        for item in items:
            try:
                played.append((item, await _replay(env, loaded, item)))
            except Exception as exc:
                scored[item.line] = (
                    str(exc) if isinstance(exc, RescoreError) else f"{type(exc).__name__}: {exc}"
                )
        if played:
            try:
                rewards = await env.ascore_episodes([e for _, e in played])
            except Exception as exc:  # the scoring path masks its own failures; this is a last guard
                rewards = [Reward.failed(f"scoring raised {type(exc).__name__}: {exc}")] * len(played)
            scored.update((i.line, r) for (i, _), r in zip(played, rewards, strict=True))
    finally:
        await asyncio.gather(*(env.aend(e) for _, e in played))
    return scored


def _loaded(env: Env, item: Item) -> Loaded[Any]:
    """The item's task: its row loaded, else the env's task at its index (or with its id)."""
    if item.row is not None:
        return env.load(item.row)
    index, wanted = item.key if isinstance(item.key, tuple) else (None, item.key)
    tasks = list(env.tasks or [])
    found = [t for t in tasks[index : index + 1] if t.task_id == wanted] if index is not None else []
    found = found or [t for t in tasks if t.task_id == wanted]
    if not found:
        raise RescoreError(
            f"task {wanted!r} is not among the env's tasks: pass --tasks, the file it was played on"
        )
    return found[0]


async def _replay(env: Env, loaded: Loaded[Any], item: Item) -> Episode:
    """The item's episode played again from its stored turns (no model), ended as it ended."""
    episode = await env.astart(loaded)
    try:
        if item.prompt is not None and _texts(item.prompt) != _texts(episode.messages):
            raise RescoreError(
                "its prompt is not the one the env builds for its task now (other env kwargs?)"
            )
        for number, completion in enumerate(item.turns):
            if episode.done:
                raise RescoreError(f"the env ends the episode after turn {number}; the stored one goes on")
            turn = await env.aadvance(episode, completion)
            seen = item.observations[number] if item.observations else None
            if seen is not None and item.note is None and _texts(turn.observation) != _texts(seen):
                item.note = f"the env answered turn {number + 1} otherwise than when it was played"
        if not episode.done:
            if item.cut is None:
                raise RescoreError("its stored turns end before the episode does")
            await env.atruncate(episode, item.cut)
    except BaseException:
        await env.aend(episode)
        raise
    return episode


def _texts(messages: list[Message]) -> list[tuple[Any, Any]]:
    return [(m.get("role"), m.get("content")) for m in messages]


def _change(before: tuple[float, bool] | None, after: Reward) -> str:
    if before is None or before[1]:
        return "still masked" if after.masked else "masked->scored"
    if after.masked:
        return "scored->masked"
    return "unchanged" if after.value == before[0] else ("0->1" if after.value > before[0] else "1->0")


def _record(kind: str, item: Item, result: Reward | str, digest: str) -> dict[str, Any]:
    """``item``'s output record: the new reward (masked, with the reason, when it failed) and the ``rescore`` entry."""
    reward = Reward.failed(f"not rescored: {result}") if isinstance(result, str) else result
    before = None if item.before is None else {"value": item.before[0], "masked": item.before[1]}
    meta = {
        "line": item.line,
        "source": digest,
        "env": item.env_id,
        "before": before,
        "after": {"value": reward.value, "masked": reward.masked},
        "change": "failed" if isinstance(result, str) else _change(item.before, reward),
        "reason": (reward.error or reward.reason or "")[:300] or None,
    }
    meta.update({k: v for k, v in (("error", result), ("note", item.note)) if isinstance(v, str)})
    return written(kind, item.record, reward, meta)


def _shown(verdict: dict[str, Any] | None) -> str:
    return "masked" if verdict is None or verdict["masked"] else f"{verdict['value']:g}"


def _output(source: Source, given: Path, out: Any, in_place: bool) -> tuple[Path, Path | None]:
    """The file the rescored records go to, and the output folder of a ``filter`` input."""
    if in_place:
        if out is not None or source.kind == "filter":
            raise RescoreError("--in-place replaces a results file: give no --out, and not a filter folder")
        return given.with_name(given.name + ".rescoring"), None
    suffix = "-rescored" if source.kind == "filter" else ".rescored.jsonl"
    target = (
        Path(out)
        if out is not None
        else given.with_name((given.name if given.is_dir() else given.stem) + suffix)
    )
    if target.resolve() == given.resolve():
        raise RescoreError(f"the output is the input {given}: pass --in-place to replace it")
    if source.kind != "filter":
        return target, None
    target.mkdir(parents=True, exist_ok=True)
    write_atomic(target / CONFIG_FILE, json.dumps(source.config, indent=2) + "\n")
    return target / ROLLOUTS_FILE, target


def _resume(out: Path, digest: str, force: bool) -> dict[int, dict[str, Any]]:
    """The records ``out`` holds, rescored from this input, by line (``out`` is rewritten without a line a kill cut)."""
    if force:
        out.unlink(missing_ok=True)
    records = list(read_objects(out))
    metas = [r[META] for r in records if isinstance(r.get(META), dict)]
    if any(m.get("source") != digest for m in metas):
        raise RescoreError(
            f"{out} holds rows rescored from another file: use another --out, or --force to start over"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    return {r[META]["line"]: r for r in records if isinstance(r.get(META), dict)}


def _finish(
    source: Source, done: dict[int, dict[str, Any]], out: Path, out_dir: Path | None, replace: Path | None
) -> RescoreSummary:
    """Rewrite the output in input order with what its kind derives, and count the changes."""
    records = [
        done.get(line) or ({k: v for k, v in rec.items() if k != META} if isinstance(rec, dict) else rec)
        for line, rec in source.lines
    ]
    derive(source, records, out_dir)
    write_atomic(out, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    if replace is not None:
        os.replace(out, replace)
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    examples: list[str] = []
    for item in source.items:
        meta: dict[str, Any] = (
            done[item.line][META] if item.line in done else {"change": "skipped", "env": item.env_id}
        )
        counts[meta["env"] or "?"][meta["change"]] += 1
        if meta["change"] not in ("unchanged", "skipped") and len(examples) < EXAMPLES:
            why = f": {meta['reason']}" if meta.get("reason") else ""
            examples.append(
                f"line {item.line} ({meta['env']}): {_shown(meta['before'])} -> {_shown(meta['after'])}{why}"
            )
    return RescoreSummary(dict(counts), examples, replace or out_dir or out)
