"""LLM judges: the ``Judge`` protocol, the HTTP client, name resolution and the judged-env base.

A judge is a model behind an OpenAI-compatible endpoint (``vllm serve`` in production,
``cascade-envs serve-judge`` on a laptop); an env knows only its URL, model name and prompt. The
answer under judgement is quoted where it cannot close its quote (``quoting``), and a judge call
that gives no verdict is the answer's 0 or a mask by one rule (``blame``).
"""

from __future__ import annotations

from .base import (
    JUDGE_API_KEY_ENV,
    JUDGE_MODEL_ENV,
    JUDGE_URL_ENV,
    SERVE_JUDGE_URL,
    Judge,
    JudgeError,
    JudgeReplyError,
    JudgeUnavailable,
)
from .env import JudgedEnv
from .fault import Canary, Failure, Health, blame
from .http_judge import HTTPJudge
from .quoting import Quote
from .resolve import make_judge

__all__ = [
    "JUDGE_API_KEY_ENV",
    "JUDGE_MODEL_ENV",
    "JUDGE_URL_ENV",
    "SERVE_JUDGE_URL",
    "Canary",
    "Failure",
    "HTTPJudge",
    "Health",
    "Judge",
    "JudgeError",
    "JudgeReplyError",
    "JudgeUnavailable",
    "JudgedEnv",
    "Quote",
    "blame",
    "make_judge",
]
