"""The vLLM engine is an optional extra: importing its module is cheap, and a missing vLLM says what to install."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from cascade_envs.core import CascadeError


def test_module_import_does_not_import_vllm():
    code = "import sys, cascade_envs.trainer.vllm_engine; print('vllm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_missing_vllm_names_the_extra(monkeypatch, tmp_path):
    from cascade_envs.trainer.config import RolloutConfig
    from cascade_envs.trainer.engine import make_engine

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a)
    )
    with pytest.raises(CascadeError, match=r"pip install 'cascade-envs\[vllm\]'") as info:
        make_engine(RolloutConfig(engine="vllm"), str(tmp_path), None)
    assert "\n" not in str(info.value)
