"""Step metrics: computed from a rollout batch, written as JSONL and TensorBoard, plotted at the end."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

from ..rollout.metrics import MixMetrics
from .batch import RolloutBatch


def rollout_metrics(batch: RolloutBatch) -> dict[str, Any]:
    """Episode metrics of every episode played (``MixMetrics``, as ``eval`` reports them), plus the batch's."""
    metrics = MixMetrics().add_groups(batch.played).as_metrics()
    metrics["batch/groups_played"] = float(len(batch.played))
    metrics["batch/groups_kept"] = float(len(batch.groups))
    metrics["batch/groups_filtered"] = float(batch.groups_filtered)
    metrics["batch/filtered_fraction"] = batch.filtered_fraction
    metrics["batch/groups_below_threshold"] = float(batch.groups_below_threshold)
    metrics["batch/groups_masked"] = float(batch.groups_masked)
    metrics["batch/groups_surplus"] = float(batch.groups_surplus)
    metrics["batch/fill_ratio"] = batch.fill_ratio
    metrics["batch/samples_masked"] = float(batch.samples_masked)
    metrics["batch/rounds"] = float(batch.rounds)
    if batch.mask_reasons:
        metrics["batch/mask_reasons"] = dict(batch.mask_reasons.most_common(3))
    metrics["batch/sequences"] = float(len(batch.sequences))
    metrics["batch/trained_tokens"] = float(sum(s.trained_tokens for s in batch.sequences))
    metrics["time/generation_s"] = batch.generation_s
    metrics["time/scoring_s"] = max(batch.rollout_s - batch.generation_s, 0.0)
    metrics["throughput/generated_tokens"] = float(batch.generated_tokens)
    metrics["throughput/generation_tokens_per_s"] = batch.generated_tokens / max(batch.generation_s, 1e-9)
    return metrics


def _mean(values: list[float] | list[int]) -> float:
    return float(sum(values) / len(values)) if values else float("nan")


class MetricsLogger:
    """Appends one JSON line per step to ``metrics.jsonl``; mirrors scalars to TensorBoard if installed."""

    def __init__(self, output_dir: str | Path, tensorboard: bool = True):
        self.dir = Path(output_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "metrics.jsonl"
        self._writer: Any = None
        if tensorboard and importlib.util.find_spec("tensorboard") is not None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(self.dir / "tensorboard"))

    def truncate_after(self, step: int) -> None:
        """On resume, forget lines logged after the checkpoint's step (they will be redone)."""
        if not self.path.exists():
            return
        kept = [line for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]
        kept = [line for line in kept if json.loads(line).get("step", 0) <= step]
        self.path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        row = {"step": step, **{k: _jsonable(v) for k, v in metrics.items()}}
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        if self._writer is not None:
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    self._writer.add_scalar(key, value, step)
            self._writer.flush()

    def history(self) -> list[dict[str, Any]]:
        return read_history(self.path)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def read_history(path: Path) -> list[dict[str, Any]]:
    """Every step logged to the ``metrics.jsonl`` at ``path`` (``[]`` when there is none)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def reward_table(history: list[dict[str, Any]], window: int | None = None) -> str:
    """Per-env mean rollout reward over the first and the last ``window`` logged steps.

    Skipped steps count too: their rollouts were scored, only the optimizer step was skipped.
    """
    steps = history
    if window is None:  # up to 3 steps at each end, never overlapping
        window = min(3, max(1, len(steps) // 2))
    keys = sorted({k for h in steps for k in h if k.startswith("reward/") and k != "reward/mean"})
    keys.append("reward/mean")
    header = f"{'env':<40} {'first':>7} {'last':>7} {'change':>7}"
    lines = [header, "-" * len(header)]
    for key in keys:
        first = _mean([h[key] for h in steps[:window] if h.get(key) is not None])
        last = _mean([h[key] for h in steps[-window:] if h.get(key) is not None])
        name = "all" if key == "reward/mean" else key.removeprefix("reward/")
        lines.append(f"{name:<40} {_fmt(first):>7} {_fmt(last):>7} {_fmt(last - first, sign=True):>7}")
    return "\n".join(lines)


def heldout_line(heldout: dict[str, dict[str, Any]]) -> str | None:
    """``held-out (8 questions of ENV never trained on, greedy): base 0.125 -> trained 0.875``."""
    if not heldout:
        return None
    any_result = heldout.get("trained") or heldout["base"]
    scores = [
        f"{when} {_fmt(r['mean'] if r['mean'] is not None else math.nan)}"
        for when in ("base", "trained")
        if (r := heldout.get(when))
    ]
    masked = sum(r["masked"] for r in heldout.values())
    note = f", {masked} answer(s) masked by verifier errors" if masked else ""
    return (
        f"held-out ({any_result['questions']} questions of {any_result['env']} never trained on, "
        f"{any_result['sampling']}{note}): {' -> '.join(scores)}"
    )


def _fmt(value: float, sign: bool = False) -> str:
    if not math.isfinite(value):
        return "n/a"
    return f"{value:+.3f}" if sign else f"{value:.3f}"


def plot_rewards(history: list[dict[str, Any]], path: str | Path, algorithm: str = "grpo") -> Path | None:
    """Write a reward-curve PNG (one line per env plus the mean); ``None`` without matplotlib."""
    if importlib.util.find_spec("matplotlib") is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    steps = history
    keys = sorted({k for h in steps for k in h if k.startswith("reward/")})
    fig, ax = plt.subplots(figsize=(7, 4))
    for key in keys:
        points = [(h["step"], h[key]) for h in steps if h.get(key) is not None]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(
                xs,
                ys,
                marker="o",
                linewidth=2.5 if key == "reward/mean" else 1.2,
                label="mean" if key == "reward/mean" else key.removeprefix("reward/"),
            )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.set_title(f"{algorithm.upper()} run: reward per env")
    ax.grid(alpha=0.3)
    if keys:
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
