"""docs/training/config.md is what .ci/config_reference.py writes from the config dataclasses."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_config_reference_is_current():
    result = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "config_reference.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr


def test_every_config_key_is_documented():
    from cascade_envs.trainer import config

    page = (ROOT / "docs" / "training" / "config.md").read_text(encoding="utf-8")
    for line in page.splitlines():
        if line.startswith("| `"):
            assert not line.rstrip().endswith("|  |"), (
                f"a key without a docstring in trainer/config.py: {line}"
            )
    for section in ("model", "mix", "rollout", "optim", "train", "heldout", "mopd", "ray"):
        cls = type(getattr(config.Config(), section))
        for name in cls.__dataclass_fields__:
            assert f"| `{section}.{name}` |" in page
