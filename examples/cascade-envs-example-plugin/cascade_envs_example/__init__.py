"""Example third-party plugin for cascade-envs: the Countdown numbers game and guess-the-number."""

__version__ = "0.1.0"
