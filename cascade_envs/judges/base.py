"""What a judge is: an object that answers chat messages with text, and the errors of judging."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..core import CascadeError, Message

JUDGE_URL_ENV = "CASCADE_ENVS_JUDGE_URL"
"""Judge URL(s) (comma-separated) used when an env is given no ``judge_url``."""
JUDGE_MODEL_ENV = "CASCADE_ENVS_JUDGE_MODEL"
"""Judge model name used when an env is given no ``judge_model``."""
JUDGE_API_KEY_ENV = "CASCADE_ENVS_JUDGE_API_KEY"
"""Bearer token sent to judge endpoints (none is sent when unset)."""
SERVE_JUDGE_PORT = 8011
SERVE_JUDGE_URL = f"http://127.0.0.1:{SERVE_JUDGE_PORT}/v1"
"""Where ``cascade-envs serve-judge`` listens by default."""


@runtime_checkable
class Judge(Protocol):
    """A judge model: takes chat messages and sampling settings, returns the reply text, or raises.

    Register one under a name with the ``cascade_envs_register_judges`` hook; its entry point is
    called with ``model=``, ``concurrency=`` and ``timeout_s=`` (plus the registration's defaults).
    """

    async def acomplete(
        self,
        messages: list[Message],
        *,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        top_p: float = 1.0,
    ) -> str: ...

    async def aclose(self) -> None: ...


class JudgeError(CascadeError):
    """A judge call that failed after its retries, or a judge reply that did not parse."""


class JudgeReplyError(JudgeError):
    """A reply that arrived but holds no verdict: no text, reasoning that never closed, or text that
    does not parse. Unlike a failed call it may be the judged answer's doing (``judges.fault``)."""


class JudgeUnavailable(CascadeError):
    """No judge is configured for ``owner`` (an env's name); the message says in one line how to start one.

    ``how`` says how to hand the started judge to the env (default: the ``judge_url=`` argument or
    ``$CASCADE_ENVS_JUDGE_URL``; the CLI names its ``--judge-url`` option instead).
    """

    def __init__(self, owner: str, how: str | None = None):
        self.owner = owner
        how = how or f"pass judge_url='{SERVE_JUDGE_URL}' or set {JUDGE_URL_ENV}"
        super().__init__(
            f"{owner} needs an LLM judge: start one with `cascade-envs serve-judge` (the embedded "
            f"model, for a laptop run) or `vllm serve MODEL`, then {how}"
        )
