"""The RLlib adapter: our env ids registered with ``ray.tune.register_env`` build working envs by name."""

from __future__ import annotations

import pytest

from cascade_envs.registry import UnknownIdError

pytest.importorskip("ray.tune", reason="Ray is not installed (pip install 'cascade-envs[ray]')")
from ray.tune.registry import ENV_CREATOR, _global_registry

from cascade_envs.rllib import register_rllib_envs

ROW = {
    "prompt": "Which planet is largest?\nA: Mars\nB: Jupiter",
    "options": [{"A": "Mars"}, {"B": "Jupiter"}],
    "expected_answer": "B",
}


def test_rllibs_registry_builds_a_working_env_by_name():
    assert register_rllib_envs(["cascade/MCQA-v0"]) == ["cascade/MCQA-v0"]
    creator = _global_registry.get(ENV_CREATOR, "cascade/MCQA-v0")  # what RLlib's env runners call
    env = creator({"thinking": False})
    try:
        observation, info = env.reset(seed=0, options={"task": ROW})
        assert observation[-1]["role"] == "user" and "Jupiter" in observation[-1]["content"]
        _, reward, terminated, _, info = env.step("\\boxed{B}")
        assert (reward, terminated, info["reward"].masked) == (1.0, True, False)
        env.reset(options={"task": ROW})
        assert env.step("\\boxed{A}")[1] == 0.0
    finally:
        env.close()


def test_every_id_by_default_and_an_unknown_id_is_refused_before_registering():
    assert "cascade/Math-v0" in register_rllib_envs()
    with pytest.raises(UnknownIdError, match="cascade/Nope-v0"):
        register_rllib_envs(["cascade/MCQA-v0", "cascade/Nope-v0"])
