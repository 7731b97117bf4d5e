"""LLM judges: the ``Judge`` protocol, the HTTP client, name resolution and the judged-env base.

A judge is a model behind an OpenAI-compatible endpoint (``vllm serve`` in production,
``cascade-envs serve-judge`` on a laptop); an env knows only its URL, model name and prompt.
"""

from __future__ import annotations

from .base import (
    JUDGE_API_KEY_ENV,
    JUDGE_MODEL_ENV,
    JUDGE_URL_ENV,
    SERVE_JUDGE_URL,
    Judge,
    JudgeError,
    JudgeUnavailable,
)
from .env import JudgedEnv
from .http_judge import HTTPJudge
from .resolve import make_judge

__all__ = [
    "JUDGE_API_KEY_ENV",
    "JUDGE_MODEL_ENV",
    "JUDGE_URL_ENV",
    "SERVE_JUDGE_URL",
    "HTTPJudge",
    "Judge",
    "JudgeError",
    "JudgeUnavailable",
    "JudgedEnv",
    "make_judge",
]
