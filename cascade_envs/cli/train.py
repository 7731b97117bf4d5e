"""``train``: RL training on an env mix, or a Cascade RL pipeline."""

from __future__ import annotations

import argparse
from typing import Any


def add_parsers(sub: Any) -> None:
    """Add ``train``."""
    p = sub.add_parser(
        "train", help="RL training on an env mix, or a Cascade RL pipeline (default: the embedded smoke run)"
    )
    p.add_argument(
        "config",
        nargs="?",
        metavar="CONFIG",
        help="a config YAML or a shipped config name (if_rl, cascade_demo, ...); a file with a top-level "
        "'stages:' list runs a pipeline (default: the embedded single run)",
    )
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a config value; in a pipeline: model.*/output_dir/eval.* set the pipeline, "
        "STAGE:KEY=VALUE one stage, any other key every stage",
    )
    p.add_argument(
        "--from-stage",
        metavar="NAME",
        help="pipeline only: train again from this stage on (its earlier runs are moved aside)",
    )
    p.add_argument(
        "--nproc",
        type=int,
        metavar="N",
        help="data-parallel ranks (train.world_size): above 1, N processes started with torchrun, the model "
        "sharded over them with FSDP2 (gloo on CPU, NCCL on GPU)",
    )
    p.set_defaults(fn=cmd_train)


def cmd_train(args: argparse.Namespace) -> int:
    from ..trainer.cli import train_main

    return train_main(args.config, args.set or [], from_stage=args.from_stage, nproc=args.nproc)
