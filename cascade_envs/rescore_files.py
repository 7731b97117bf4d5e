"""What ``rescore`` reads and writes in each kind of results file; the mechanism is ``cascade_envs.rescore``.

Kinds, detected (``read_source``):

- ``eval`` (and the trainer's saved rollouts): a runner record per line; the episode's turns are
  its last ``turns`` assistant messages (the prompt before them, the env's answers between them),
  with their finish reasons from its ``trajectory``; the task row and env kwargs are recorded with
  it (``task_row``, ``env_kwargs``; older files: found by ``task_id`` in the env's tasks, ``--tasks``).
- ``solve``: its ``config`` line names the env, its kwargs and task file; an attempt or outcome
  with a reward is one answer to its task (``index``, ``task_id``) scored alone, as ``solve`` scores
  it; verifications and configs are copied. ``submit`` is refused: its rounds saw the verdicts.
- ``filter`` (an output folder): ``filter.json`` names the env, kwargs and task file (checked by its
  digest), ``rollouts.jsonl`` holds the episodes (``row``: their line in the task file; ``k`` per
  play); the outcomes, kept rows, histogram and summary are decided again (``derive``).
- ``nemo-gym`` rollouts (0.4 and 0.7): a task row's fields with the ``response`` that was verified
  (its model turns split at the tool outputs); masked when ``mask_sample``, a failure class (a
  ``*_failures.jsonl`` row) or ``invalid_judge_response`` says so. The env is the row's
  ``cascade_env`` (``export --format nemo-gym``) or ``--env``; the task row its ``cascade_row``, a
  ``--tasks`` row (NeMo Gym's materialized inputs by ``_ng_task_index``, any task file by prompt),
  else the rollout less its verdict fields.

A record that cannot be read gets an ``Item`` with its ``error``; ``written`` puts a new reward in a
record the kind's way (a NeMo Gym row by the serving protocol's ``reward_fields``).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .core import CascadeError, Completion, Message, Reward, Row
from .data import read_rows, resolve_path, row_id, task_id
from .filtering import (
    CONFIG_FILE,
    OUTCOMES_FILE,
    ROLLOUTS_FILE,
    FilterJob,
    FilterSettings,
    decide,
    read_outcomes,
)
from .integrations.nemo_gym.responses import completion_of, output_items
from .integrations.nemo_gym.server import reward_fields
from .resume import sha256, write_atomic
from .tts.scoring import SOLVED

META = "rescore"
"""The key of each rescored record's entry: its input line, source digest, env, before, change, reason."""
CUT_SHORT = "cut short when it was played (deadline, token budget or context overflow)"
GYM_CUT = "the rollout ended before the episode did"
GYM_VERDICT = ("response", "reward", "mask_sample", META)
"""Fields of a NeMo Gym rollout that hold its answer or verdict (with ``reward_*`` and ``_ng_*``), never
handed to the env as task fields."""


class RescoreError(CascadeError):
    """Bad rescore arguments, a file that cannot be rescored (one line naming the fix), or a record that cannot."""


@dataclass
class Item:
    """One stored record holding a verdict, and what playing its episode again needs."""

    line: int
    record: dict[str, Any]
    env_id: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)
    row: Row | None = None
    key: Any = None
    """Where the env's tasks hold the task when no row is recorded: ``(index, task_id)`` or a task id."""
    turns: list[Completion] = field(default_factory=list)
    prompt: list[Message] | None = None
    observations: list[list[Message]] | None = None
    cut: str | None = None
    """Why to cut the episode when its stored turns end before the env ends it (``None``: an error)."""
    group: Any = None
    before: tuple[float, bool] | None = None
    """The stored ``(value, masked)``, for the table only (``None``: no verdict)."""
    error: str | None = None
    note: str | None = None
    env_key: str = ""

    @property
    def masked(self) -> bool:
        return self.before is None or self.before[1]


@dataclass
class Source:
    """A results file read: its kind, its JSONL (``path``) as ``(line, object)``, the items, its config."""

    kind: str
    path: Path
    lines: list[tuple[int, Any]]
    items: list[Item] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    rows: dict[Any, Any] = field(default_factory=dict)
    """A ``filter`` input's task rows by line."""


def read_source(path: Path, env_id: str | None, tasks: str | None) -> Source:
    """Read a results file (or ``filter`` folder), detect its kind and make its items."""
    if path.is_dir():
        return _filter_source(path, tasks)
    lines = list(read_rows(path))
    first = next((obj for _, obj in lines if isinstance(obj, dict)), {})
    if first.get("kind") == "config":
        return _solve_source(path, lines, first, tasks)
    if "reward_info" in first and "messages" in first:
        return Source("eval", path, lines, [_item(env_id, line, rec, _eval_item) for line, rec in lines])
    if "responses_create_params" in first or "response" in first:
        return _gym_source(path, lines, env_id, tasks)
    raise RescoreError(f"{path}: not a results file of eval, solve or filter, nor NeMo Gym rollouts")


def _item(env_id: str | None, line: int, rec: Any, make_item: Callable[..., Item], *args: Any) -> Item:
    """``make_item(line, rec, *args)``, or an item that says why the record is malformed."""
    if not isinstance(rec, dict):
        return Item(line, {}, env_id or "", error=f"malformed record: {rec}")
    try:
        return make_item(line, rec, *args)
    except Exception as exc:  # whatever is wrong with one record, the run goes on
        error = (
            str(exc) if isinstance(exc, RescoreError) else f"malformed record: {type(exc).__name__}: {exc}"
        )
        return Item(line, rec, env_id or str(rec.get("env_id") or rec.get("cascade_env") or ""), error=error)


def _eval_item(line: int, rec: dict[str, Any]) -> Item:
    return _episode_item(line, rec, rec["env_id"], rec.get("env_kwargs") or {}, rec.get("task_row"))


def _episode_item(line: int, rec: dict[str, Any], env_id: str, kwargs: dict[str, Any], row: Any) -> Item:
    """The item of a runner's episode record (``eval``, ``filter``)."""
    info = rec.get("reward_info")
    before = (float(info["value"]), bool(info["masked"])) if isinstance(info, dict) else None
    item = Item(
        line, rec, env_id, dict(kwargs), row, rec.get("task_id"), group=rec.get("group"), before=before
    )
    if rec.get("error"):
        item.error = f"the episode failed when it was played ({rec['error']}): it has no answer to score"
        return item
    messages, turns = rec["messages"], int(rec["turns"])
    at = [i for i, m in enumerate(messages) if m["role"] == "assistant"][-turns:] if turns > 0 else []
    if not at or len(at) != turns:
        raise ValueError(f"its messages do not hold its {turns} model turn(s)")
    finishes = [t.get("finish_reason") for t in (rec.get("trajectory") or {}).get("turns", [])]
    if len(finishes) != turns:
        finishes = [None] * (turns - 1) + [rec.get("finish_reason")]
    item.turns = [Completion(str(messages[i]["content"] or ""), f) for i, f in zip(at, finishes, strict=True)]
    item.prompt = messages[: at[0]]
    item.observations = [messages[i + 1 : j] for i, j in zip(at, [*at[1:], len(messages)], strict=True)]
    item.cut = CUT_SHORT if rec.get("truncated") else None
    return item


def _solve_source(
    path: Path, lines: list[tuple[int, Any]], config: dict[str, Any], tasks: str | None
) -> Source:
    if config.get("strategy") == "submit":
        raise RescoreError(
            f"{path}: `solve --strategy submit` results cannot be rescored: its rounds saw the verdicts"
        )
    kwargs = {**(config.get("env_kwargs") or {}), "tasks": tasks or config.get("tasks")}
    scored = [
        (line, rec)
        for line, rec in lines
        if not isinstance(rec, dict)
        or (rec.get("kind") in ("attempt", "outcome") and rec.get("reward") is not None)
    ]  # the config line, verifications and tasks with no answer submitted hold no verdict: copied
    items = [_item(config["env"], line, rec, _solve_item, config["env"], kwargs) for line, rec in scored]
    return Source("solve", path, lines, items, config)


def _solve_item(line: int, rec: dict[str, Any], env_id: str, kwargs: dict[str, Any]) -> Item:
    outcome = rec["kind"] == "outcome"
    if outcome:
        value, masked, text = rec["reward"]["value"], rec["reward"]["masked"], rec["selected"]
    else:
        value, masked, text = rec["reward"], rec["masked"], rec["completion"]
    if not isinstance(text, str):
        raise TypeError(f"its answer is a {type(text).__name__}, not text")
    before = (float(value), bool(masked))
    item = Item(line, rec, env_id, kwargs, key=(int(rec["index"]), str(rec["task_id"])), before=before)
    item.turns = [Completion(text)]
    if not outcome and rec.get("error"):
        item.error = f"the model call failed when it was played ({rec['error']}): it has no answer to score"
    return item


def _filter_source(folder: Path, tasks: str | None) -> Source:
    try:
        config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RescoreError(f"{folder}: not a filter output folder ({CONFIG_FILE}: {exc})") from None
    if not tasks and sha256(resolve_path(config["tasks"])) != config["tasks_sha256"]:
        raise RescoreError(
            f"{config['tasks']} changed since the filter ran: pass --tasks, the file it ran on"
        )
    config["tasks"] = tasks or config["tasks"]
    source = Source("filter", folder / ROLLOUTS_FILE, list(read_rows(folder / ROLLOUTS_FILE)), config=config)
    source.rows = dict(read_rows(config["tasks"]))
    plays: Counter[Any] = Counter()
    for line, rec in source.lines:
        item = _item(config["env"], line, rec, _filter_item, config, source.rows)
        row, plays[item.group] = item.group, plays[item.group] + 1
        item.group = (row, (plays[row] - 1) // config["k"])  # a group: the k rollouts of one play of a row
        source.items.append(item)
    return source


def _filter_item(line: int, rec: dict[str, Any], config: dict[str, Any], rows: dict[int, Any]) -> Item:
    row = rows.get(rec["row"])
    if not isinstance(row, dict):
        raise RescoreError(f"line {rec['row']} of {config['tasks']} is not a task row")
    item = _episode_item(line, rec, config["env"], config["env_kwargs"], row)
    item.group = rec["row"]
    return item


def _gym_source(path: Path, lines: list[tuple[int, Any]], env_id: str | None, tasks: str | None) -> Source:
    if env_id is None and any(isinstance(r, dict) and not r.get("cascade_env") for _, r in lines):
        raise RescoreError(
            f"{path}: NeMo Gym rollouts name no cascade env: pass --env ID (e.g. cascade/MCQA-v0)"
        )
    rows: dict[Any, Row] = {}
    for _, row in read_rows(tasks) if tasks else ():
        if isinstance(row, dict):
            rows.setdefault(("index", row.get("_ng_task_index")), row)
            rows.setdefault(("prompt", _prompt_key(row)), row)
    rows.pop(("index", None), None)
    items = [_item(env_id, line, rec, _gym_item, env_id, tasks, rows) for line, rec in lines]
    return Source("nemo-gym", path, lines, items)


def _gym_item(
    line: int, rec: dict[str, Any], env_id: str | None, tasks: str | None, rows: dict[Any, Row]
) -> Item:
    flagged = rec.get("mask_sample") or rec.get("_ng_failure_class") or rec.get("invalid_judge_response")
    value = rec.get("reward")
    before = (float(value), bool(flagged)) if isinstance(value, (int, float)) else None
    row = rec.get("cascade_row")
    if not isinstance(row, dict) and tasks:
        row = rows.get(("index", rec.get("_ng_task_index"))) or rows.get(("prompt", _prompt_key(rec)))
        if row is None:
            raise RescoreError(f"no row of {tasks} matches it (by _ng_task_index, then by prompt)")
    if not isinstance(row, dict):
        row = {k: v for k, v in rec.items() if k not in GYM_VERDICT and not k.startswith(("_ng_", "reward_"))}
    group = rec.get("_ng_task_index", _prompt_key(rec))
    item = Item(
        line, rec, env_id or str(rec["cascade_env"]), row=row, cut=GYM_CUT, group=group, before=before
    )
    if "response" not in rec:
        item.error = "the rollout holds no response: it failed before its answer"
        return item
    output = output_items(rec["response"])
    ends = [i for i, o in enumerate(output) if o["type"] == "function_call_output"]
    spans = [(a, b) for a, b in zip([0, *(e + 1 for e in ends)], [*ends, len(output)], strict=True) if a < b]
    details = rec["response"].get("incomplete_details")  # a cut at the length limit: the last turn's
    item.turns = [
        completion_of({"output": output[a:b], "incomplete_details": details if b == len(output) else None})[0]
        for a, b in spans
    ]
    return item


def _prompt_key(row: dict[str, Any]) -> str:
    params = row.get("responses_create_params")
    prompt = params.get("input") if isinstance(params, dict) else None
    if isinstance(prompt, list):
        prompt = [[m.get("role"), m.get("content")] if isinstance(m, dict) else m for m in prompt]
    return json.dumps(prompt, ensure_ascii=False)


def written(kind: str, record: dict[str, Any], reward: Reward, meta: dict[str, Any]) -> dict[str, Any]:
    """``record`` with ``reward`` in its kind's fields, and the ``rescore`` entry ``meta``."""
    if kind == "nemo-gym":  # a scored row is no failure any more (NeMo Gym's failure stamps go)
        kept = {k: v for k, v in record.items() if reward.masked or not k.startswith("_ng_failure")}
        if "invalid_judge_response" in kept:
            kept["invalid_judge_response"] = reward.masked
        return {**kept, **reward_fields(reward), META: meta}
    if kind == "solve" and record.get("kind") == "attempt":
        verdict = {"reward": reward.value, "masked": reward.masked, "reason": reward.error or reward.reason}
        return {**record, **verdict, META: meta}
    if kind == "solve":
        return {**record, "reward": reward.to_dict(), META: meta}
    return {**record, "reward": reward.value, "reward_info": reward.to_dict(), META: meta}


def derive(source: Source, records: list[Any], out_dir: Path | None) -> None:
    """What the kind derives from its rewards, again: a ``solve`` outcome's pass@N and selector
    verdict (in ``records``), a ``filter`` run's outcomes, kept rows, histogram and summary (in ``out_dir``)."""
    if source.kind == "solve":
        _solve_outcomes([r for r in records if isinstance(r, dict)])
    elif source.kind == "filter" and out_dir is not None:
        _filter_outcomes(source, [r for r in records if isinstance(r, dict)], out_dir)


def _solve_outcomes(records: list[dict[str, Any]]) -> None:
    right: dict[Any, list[bool]] = defaultdict(list)
    for r in records:
        if r.get("kind") == "attempt" and r.get("role") in ("candidate", "refiner"):
            right[r.get("index")].append(
                r.get("reward") is not None and not r["masked"] and r["reward"] >= SOLVED
            )
    for r in records:
        if r.get("kind") == "outcome" and isinstance(r.get("reward"), dict) and right[r.get("index")]:
            r["pass_at_n"] = any(right[r["index"]])
            chosen = not r["reward"]["masked"] and r["reward"]["value"] >= SOLVED
            r["selector_correct"] = chosen if r["pass_at_n"] else None


def _filter_outcomes(source: Source, records: list[dict[str, Any]], out_dir: Path) -> None:
    """Each row's outcome from the last ``k`` rollouts it has (its latest play), as ``filter`` decides it."""
    cfg = source.config
    settings = FilterSettings(cfg["k"], cfg["keep_unsolved"], cfg["solved_threshold"], cfg["seed"])
    rewards: dict[int, list[Reward]] = defaultdict(list)
    for r in records:
        if isinstance(source.rows.get(r.get("row")), dict) and isinstance(r.get("reward_info"), dict):
            rewards[r["row"]].append(Reward(**r["reward_info"]))
    outcomes = [
        decide(line, task_id(source.rows[line]), row_id(source.rows[line]), found[-settings.k :], settings)
        for line, found in rewards.items()
    ]
    outcomes += [o for o in read_outcomes(source.path.parent / OUTCOMES_FILE) if o.outcome == "bad_row"]
    outcomes.sort(key=lambda o: o.row)
    write_atomic(
        out_dir / OUTCOMES_FILE, "".join(json.dumps(o.to_dict(), ensure_ascii=False) + "\n" for o in outcomes)
    )
    job = FilterJob(cfg["env"], cfg["tasks"], out_dir, settings, env_kwargs=cfg["env_kwargs"])
    job.done = {o.row: o for o in outcomes if o.outcome != "incomplete"}
    job.finish()
