"""Without the OpenHands SDK (Python 3.11) the env module imports and making the env refuses in one line."""

from __future__ import annotations

import importlib.util

import pytest

from cascade_envs.core import CascadeError

HAS_SDK = (
    importlib.util.find_spec("openhands") is not None
    and importlib.util.find_spec("openhands.tools") is not None
)


@pytest.mark.skipif(HAS_SDK, reason="the OpenHands SDK is installed here")
def test_making_the_env_without_the_sdk_names_the_fix():
    from cascade_envs.envs.swe.env import SweEnv

    with pytest.raises(CascadeError) as caught:
        SweEnv()
    message = str(caught.value)
    assert "\n" not in message
    assert "pip install 'cascade-envs[swe]'" in message and "Python >= 3.12" in message
