"""What a Cascade RL pipeline run shows: the held-out table, the regression alarm and ``eval.png``.

Rows are checkpoints in pipeline order (the start model first, then each finished stage); a row's
change is measured against the checkpoint its stage *started from* (its ``parent``: the previous
chained stage, the start model, or the stage named by ``init:``), so a branch and the stage after
it each show what their own training did. The regression alarm flags a domain whose score at a
row fell more than ``margin`` below the best score of any earlier checkpoint: that earlier
checkpoint is a better teacher for the domain, which is what MOPD's ``auto`` teachers are for.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .metrics import read_history

Scores = dict[str, dict[str, Any]]
"""``{env_id: evaluation result}`` of one checkpoint (``evaluation.evaluate_checkpoint``)."""


@dataclass
class EvalRow:
    """One evaluated checkpoint: its stage name, scores, the row it started from, its alarms, and
    whether it is a branch (a teacher trained aside)."""

    name: str
    scores: Scores
    parent: int | None = None
    regressions: dict[str, dict[str, Any]] = field(default_factory=dict)
    branch: bool = False

    @property
    def label(self) -> str:
        return f"{self.name} (branch)" if self.branch else self.name


def short_name(env_id: str) -> str:
    """``cascade/InstructionFollowing-v0`` -> ``InstructionFollowing``."""
    name = env_id.rsplit("/", 1)[-1]
    head, sep, tail = name.rpartition("-v")
    return head if sep and tail.isdigit() else name


def score(result: dict[str, Any] | None) -> float | None:
    """The mean of an evaluation result; ``None`` when not evaluated or every answer was masked."""
    value = (result or {}).get("mean")
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def trusted(result: dict[str, Any] | None) -> float | None:
    """``score(result)`` when at least half of its answers were scored (not masked), else ``None``: a
    mean over the few answers a failing judge let through is no score to raise an alarm over."""
    value = score(result)
    scored, masked = int((result or {}).get("scored") or 0), int((result or {}).get("masked") or 0)
    return value if value is not None and scored >= masked else None


def regressions(
    rows: list[EvalRow], index: int, env_ids: list[str], margin: float
) -> dict[str, dict[str, Any]]:
    """``{env_id: {score, best, best_at, drop}}`` for each env whose score at ``rows[index]`` is more
    than ``margin`` below its best over ``rows[:index]`` (the first such checkpoint on ties); a score
    with more masked answers than scored ones is left out (``trusted``)."""
    found: dict[str, dict[str, Any]] = {}
    for env_id in env_ids:
        value = trusted(rows[index].scores.get(env_id))
        earlier = [(s, r.label) for r in rows[:index] if (s := trusted(r.scores.get(env_id))) is not None]
        if value is None or not earlier:
            continue
        best, best_at = max(earlier, key=lambda pair: pair[0])
        if best - value > margin + 1e-9:
            found[env_id] = {"score": value, "best": best, "best_at": best_at, "drop": round(best - value, 6)}
    return found


def alarm_lines(rows: list[EvalRow], margin: float) -> list[str]:
    """One line per flagged (row, env), in row order."""
    return [
        f"regression alarm: after {row.label}, {short_name(env_id)} {r['score']:.3f} is {r['drop']:.3f} below "
        f"its best ({r['best_at']} {r['best']:.3f}; margin {margin:g}): a later MOPD stage with auto "
        "teachers can distil it back"
        for row in rows
        for env_id, r in row.regressions.items()
    ]


def cell(row: EvalRow, rows: list[EvalRow], env_id: str) -> tuple[float | None, float | None, str]:
    """``(score, change vs the parent row, text)`` of one table cell."""
    result = row.scores.get(env_id)
    value = score(result)
    if result is None:
        return None, None, "n/a"
    if value is None:
        return None, None, "masked"
    before = score(rows[row.parent].scores.get(env_id)) if row.parent is not None else None
    delta = None if before is None else value - before
    text = f"{value:.3f}"
    if delta is not None:
        text += " =" if abs(delta) < 5e-4 else f" {delta:+.3f}"
    if env_id in row.regressions:
        text += " !"
    if result.get("masked"):
        text += f" [{result['masked']} masked]"
    return value, delta, text


def eval_table(rows: list[EvalRow], env_ids: list[str]) -> str:
    """Rows = checkpoints, columns = envs, cells = mean score with the change vs the checkpoint the
    stage started from (``+0.125``/``-0.250``/``=``) and ``!`` where the regression alarm fired; ``n/a``:
    not evaluated, ``masked``: no scored answer; ``[k masked]``: masked answers left out of a mean."""
    names = [short_name(e) for e in env_ids]
    cells = [[cell(row, rows, env_id)[2] for env_id in env_ids] for row in rows]
    label_width = max([len(r.label) for r in rows] + [5])
    widths = [max([len(n)] + [len(c[i]) for c in cells]) for i, n in enumerate(names)]
    lines = [
        "stage".ljust(label_width) + "  " + "  ".join(n.ljust(w) for n, w in zip(names, widths, strict=True))
    ]
    for row, line in zip(rows, cells, strict=True):
        lines.append(
            row.label.ljust(label_width)
            + "  "
            + "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True))
        )
    return "\n".join(s.rstrip() for s in lines)


def stage_rewards(folder: Path) -> list[float | None]:
    """The mean training reward of every logged step of the stage trained in ``folder`` (its
    ``metrics.jsonl``); ``None`` for a step that logged none."""
    values = [s.get("reward/mean") for s in read_history(folder / "metrics.jsonl") if "step" in s]
    return [float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None for v in values]


def plot_cascade(
    rows: list[EvalRow], env_ids: list[str], curves: dict[str, list[float | None]], path: str | Path
) -> Path | None:
    """A PNG: left, the stage x domain heatmap of held-out scores with each cell's change (``!``: alarm);
    right, the training reward of every step, stage after stage. ``None`` without matplotlib."""
    if importlib.util.find_spec("matplotlib") is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (heat, curve) = plt.subplots(
        1, 2, figsize=(6 + 1.3 * len(env_ids), 1.5 + 0.45 * len(rows)), gridspec_kw={"width_ratios": [3, 2]}
    )
    grid = [[cell(row, rows, e)[0] for e in env_ids] for row in rows]
    data = [[math.nan if v is None else v for v in line] for line in grid]
    image = heat.imshow(data, cmap="RdYlGn", vmin=0.0, vmax=1.0, aspect="auto")
    for i, row in enumerate(rows):
        for j, env_id in enumerate(env_ids):
            value, delta, _ = cell(row, rows, env_id)
            text = "n/a" if value is None else f"{value:.2f}"
            if delta is not None:
                text += "\n=" if abs(delta) < 5e-4 else f"\n{delta:+.2f}"
            if env_id in row.regressions:
                text += " !"
            heat.text(j, i, text, ha="center", va="center", fontsize=8)
    heat.set_xticks(range(len(env_ids)), [short_name(e) for e in env_ids], rotation=25, ha="right")
    heat.set_yticks(range(len(rows)), [r.label for r in rows])
    heat.set_title("held-out score after each stage (change vs where it started; ! = regression)", fontsize=9)
    fig.colorbar(image, ax=heat, fraction=0.04)
    offset = 0
    for name, rewards in curves.items():
        xs = [offset + i + 1 for i, v in enumerate(rewards) if v is not None]
        ys = [v for v in rewards if v is not None]
        if xs:
            curve.plot(xs, ys, marker="o", markersize=3, label=name)
        offset += len(rewards)
        curve.axvline(offset + 0.5, color="grey", linewidth=0.5, linestyle=":")
    curve.set_xlabel("optimizer step (stages in order)")
    curve.set_ylabel("mean training reward")
    curve.set_title("training reward per stage", fontsize=9)
    curve.grid(alpha=0.3)
    if curve.get_legend_handles_labels()[0]:
        curve.legend(fontsize="x-small", loc="best")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
