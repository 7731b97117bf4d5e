"""The hook implementation that the ``cascade_envs`` entry point names.

Registration only records entry points: the env modules are imported on first ``make()``.
"""

from __future__ import annotations

from cascade_envs.plugins import hookimpl


@hookimpl
def cascade_envs_register_envs(register) -> None:
    register("example/Countdown-v0", entry_point="cascade_envs_example.countdown:CountdownEnv")
    register(
        "example/CountdownTools-v0", entry_point="cascade_envs_example.countdown_tools:CountdownToolsEnv"
    )
    register(
        "example/GuessNumber-v0",
        entry_point="cascade_envs_example.guess:GuessNumberEnv",
        low=1,
        high=100,
        max_steps=7,
    )
