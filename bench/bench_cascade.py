"""The report's claims at laptop scale: the cascade vs one joint run vs the cascade without MOPD.

For each seed, three arms with the same model, data and total optimizer steps (``trainer/cascade_arms.py``):

- ``cascade``: the pipeline as written (default: the shipped ``cascade_demo``);
- ``joint``: one GRPO run over the cascade's whole mix, each env weighted by the prompts the cascade
  gave it, for the sum of the chained stages' steps;
- ``no_mopd``: the cascade with its MOPD stage trained as GRPO on the same prompts and steps.

All arms of a seed share one output folder (``--out``/seed<N>): the start model is evaluated once and
``no_mopd`` reuses the cascade's stages before MOPD (same configs: skipped, not retrained). Every
checkpoint is scored greedily on the pipeline's held-out ``eval:`` envs. Prints one table (held-out
score per domain per arm and seed, and the mean over seeds), the regressions the cascade suffered
(a domain's score after a stage minus its best so far) and how much of each MOPD recovered; writes
``--plot`` (bars per domain and arm) and ``--json``; each arm's table and picture are kept as
``<arm>_eval.json``/``<arm>_eval.png`` in the seed's folder. Reruns resume: finished stages are skipped.

    python bench/bench_cascade.py                      # cascade_demo, seeds 0 and 1 (about 1 h a seed on 2 cores)
    python bench/bench_cascade.py --seeds 0 --arms cascade,joint
    python bench/bench_cascade.py --set train.steps=1  # any pipeline --set, e.g. a quick check
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import yaml

from cascade_envs.trainer.cascade import find_config, load_pipeline
from cascade_envs.trainer.cascade_arms import NO_MOPD_SUFFIX, joint, no_mopd
from cascade_envs.trainer.cascade_report import EvalRow, regressions, score, short_name, trusted
from cascade_envs.trainer.cascade_run import EVAL_FILE, PLOT_FILE, START, CascadeRunner

ARMS = ("cascade", "joint", "no_mopd")


def run_arm(
    arm: str, source: Path, seed_dir: Path, overrides: list[str]
) -> tuple[list[EvalRow], dict, float]:
    """Run one arm of one seed; ``(its rows, its state, wall seconds)``."""
    path = source
    if arm != "cascade":
        base = load_pipeline(source, overrides)
        data = joint(base) if arm == "joint" else no_mopd(base)
        path = seed_dir / f"{arm}.yaml"
        seed_dir.mkdir(parents=True, exist_ok=True)
        for stage in data["stages"]:  # a config named by path resolves from the original pipeline's folder
            candidate = source.parent / stage["config"]
            if candidate.is_file():
                stage["config"] = str(candidate.resolve())
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    started = time.perf_counter()
    runner = CascadeRunner(load_pipeline(path, overrides))
    state = runner.run()
    wall = time.perf_counter() - started
    for name in (EVAL_FILE, PLOT_FILE):  # the arms share the folder: keep each arm's report
        if (seed_dir / name).exists():
            shutil.copyfile(seed_dir / name, seed_dir / f"{arm}_{name}")
    return runner.rows(state), state.to_dict(), wall


def final(rows: list[EvalRow]) -> EvalRow:
    """The arm's last chained checkpoint (branches are teachers, not the arm's result)."""
    return [r for r in rows if not r.branch][-1]


def cascade_regressions(rows: list[EvalRow], envs: list[str]) -> list[tuple[str, str, float]]:
    """``(stage, env, score minus best so far)`` for every drop along the chained stages."""
    chained = [r for r in rows if not r.branch]
    out = []
    for i in range(1, len(chained)):
        for env_id, r in regressions(chained, i, envs, 0.0).items():
            out.append((chained[i].label, env_id, -r["drop"]))
    return out


def mopd_recovery(rows: list[EvalRow], state: dict, envs: list[str]) -> list[dict[str, Any]]:
    """Per env MOPD distils: the regression it started from, what it recovered and its teacher's score."""
    out = []
    for name, record in state["stages"].items():
        if not record.get("teachers") or name.endswith(NO_MOPD_SUFFIX):
            continue
        index = next(i for i, r in enumerate(rows) if r.name == name)
        row = rows[index]
        parent = rows[row.parent or 0]
        for env_id, choice in record["teachers"].items():
            if env_id not in envs or not isinstance(choice, dict):
                continue
            before, after = score(parent.scores.get(env_id)), score(row.scores.get(env_id))
            best = max(
                (s for r in rows[:index] if (s := score(r.scores.get(env_id))) is not None), default=None
            )
            if None in (before, after, best):
                continue
            out.append(
                {
                    "stage": name,
                    "env": env_id,
                    "teacher": choice.get("from"),
                    "teacher_score": choice.get("score"),
                    "before": before,
                    "after": after,
                    "best_before": best,
                    "regression": round(best - before, 6),
                    "recovered": round(after - before, 6),
                }
            )
    return out


def table(results: dict[str, dict[int, EvalRow]], start: EvalRow, envs: list[str], seeds: list[int]) -> str:
    """Rows = arm x seed (and the mean over seeds), columns = envs and their mean; a score with more
    masked answers than scored ones (a failing judge) shows as ``masked`` and is left out of means."""
    names = [short_name(e) for e in envs] + ["mean"]
    lines = ["arm      seed  " + "  ".join(n.rjust(max(len(n), 6)) for n in names)]

    def line(arm: str, seed: str, values: list[float | None]) -> str:
        known = [v for v in values if v is not None]
        cells = [*values, statistics.fmean(known) if known else None]
        return f"{arm:<8} {seed:>4}  " + "  ".join(
            ("masked" if v is None else f"{v:.3f}").rjust(max(len(n), 6))
            for n, v in zip(names, cells, strict=True)
        )

    lines.append(line("start", "-", [trusted(start.scores.get(e)) for e in envs]))
    for arm, by_seed in results.items():
        for seed in seeds:
            if seed in by_seed:
                lines.append(line(arm, str(seed), [trusted(by_seed[seed].scores.get(e)) for e in envs]))
        per_env = []
        for e in envs:
            values = [
                v for s in seeds if s in by_seed and (v := trusted(by_seed[s].scores.get(e))) is not None
            ]
            per_env.append(statistics.fmean(values) if values else None)
        lines.append(line(arm, "mean", per_env))
    return "\n".join(lines)


def plot(results: dict[str, dict[int, EvalRow]], start: EvalRow, envs: list[str], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    envs = [
        e
        for e in envs
        if any(trusted(r.scores.get(e)) is not None for b in results.values() for r in b.values())
    ]
    fig, ax = plt.subplots(figsize=(1.6 * len(envs) + 3, 4.2))
    width = 0.8 / (len(results) + 1)
    for k, (arm, by_seed) in enumerate([("start", {0: start}), *results.items()]):
        means, lows, highs = [], [], []
        for e in envs:
            values = [v for r in by_seed.values() if (v := trusted(r.scores.get(e))) is not None] or [0.0]
            mean = statistics.fmean(values)
            means.append(mean)
            lows.append(mean - min(values))
            highs.append(max(values) - mean)
        xs = [i + (k - len(results) / 2) * width for i in range(len(envs))]
        ax.bar(xs, means, width, yerr=[lows, highs], capsize=2, label=arm)
    ax.set_xticks(range(len(envs)), [short_name(e) for e in envs], rotation=20, ha="right")
    ax.set_ylabel("held-out score (greedy)")
    ax.set_title(
        "cascade vs joint vs no-MOPD, same model, data and steps (mean over seeds; whiskers: min-max)",
        fontsize=9,
    )
    ax.legend(fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pipeline", default="cascade_demo", help="a pipeline file or shipped name")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--out", default="runs/bench_cascade")
    parser.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE")
    parser.add_argument("--plot", default="bench/cascade.png")
    parser.add_argument("--json", default=None, help="default: <out>/bench_cascade.json")
    args = parser.parse_args()
    source = find_config(args.pipeline).resolve()
    seeds = [int(s) for s in args.seeds.split(",")]
    arms = [a for a in args.arms.split(",") if a]
    unknown = set(arms) - set(ARMS)
    if unknown:
        parser.error(f"unknown arm(s) {sorted(unknown)}; choose from {', '.join(ARMS)}")
    out = Path(args.out)
    results: dict[str, dict[int, EvalRow]] = {arm: {} for arm in arms}
    report: dict[str, Any] = {
        "pipeline": str(source),
        "seeds": seeds,
        "arms": {},
        "overrides": args.overrides,
    }
    start: EvalRow | None = None
    envs = list(load_pipeline(source, args.overrides).spec.eval.envs)
    for seed in seeds:
        seed_dir = out / f"seed{seed}"
        overrides = [*args.overrides, f"train.seed={seed}", f"output_dir={seed_dir}"]
        for arm in arms:
            rows, state, wall = run_arm(arm, source, seed_dir, overrides)
            start = rows[0] if rows[0].name == START else start
            results[arm][seed] = final(rows)
            entry: dict[str, Any] = {
                "wall_s": round(wall, 1),
                "final": {e: score(results[arm][seed].scores.get(e)) for e in envs},
                "stages": [r.label for r in rows],
            }
            if arm == "cascade":
                entry["regressions"] = cascade_regressions(rows, envs)
                entry["mopd"] = mopd_recovery(rows, state, envs)
            report["arms"].setdefault(arm, {})[seed] = entry
            print(f"bench_cascade: seed {seed} {arm}: {wall / 60:.1f} min", flush=True)
    assert start is not None
    print(f"\nheld-out scores of each arm's last checkpoint (greedy; {source.name}; seeds {seeds}):")
    print(table(results, start, envs, seeds))
    for seed in seeds:
        entry = report["arms"].get("cascade", {}).get(seed)
        if not entry:
            continue
        drops = (
            ", ".join(f"{stage} {short_name(e)} {d:+.3f}" for stage, e, d in entry["regressions"]) or "none"
        )
        print(f"\nseed {seed}: cascade regressions (score after a stage minus the best so far): {drops}")
        for m in entry["mopd"]:
            print(
                f"seed {seed}: {m['stage']} on {short_name(m['env'])}: started {m['before']:.3f} (best so far "
                f"{m['best_before']:.3f}, a regression of {m['regression']:.3f}), ended {m['after']:.3f} "
                f"({m['recovered']:+.3f}); teacher {m['teacher']} {m['teacher_score']:.3f}"
            )
    json_path = Path(args.json or out / "bench_cascade.json")
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    png = plot(results, start, envs, Path(args.plot))
    print(f"\nwrote {json_path}" + (f" and {png}" if png else " (no plot: matplotlib is not installed)"))


if __name__ == "__main__":
    main()
