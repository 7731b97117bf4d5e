"""``make_judge``: turn an env's ``judge_url=`` (URL, URLs, registered name, Judge, or None) into a Judge."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..registry import judges
from .base import JUDGE_MODEL_ENV, JUDGE_URL_ENV, Judge, JudgeUnavailable
from .http_judge import HTTPJudge

JudgeSource = str | Sequence[str] | Judge | None


def make_judge(
    judge_url: JudgeSource = None,
    *,
    model: str | None = None,
    concurrency: int = 32,
    timeout_s: float = 120.0,
    owner: str = "this env",
    **kwargs: Any,
) -> Judge:
    """The judge named by ``judge_url``; no network is touched.

    - a ``Judge`` object: used as is;
    - ``"http(s)://..."`` (several comma-separated) or a list of URLs: an ``HTTPJudge`` over them;
    - any other string: the judge registered under that name (``cascade_envs_register_judges``),
      its entry point called with ``model=`` (when given), ``concurrency=``, ``timeout_s=`` and ``kwargs``;
    - ``None`` or a blank string: ``$CASCADE_ENVS_JUDGE_URL``, else ``JudgeUnavailable`` saying how to
      start a judge.

    ``model`` defaults to ``$CASCADE_ENVS_JUDGE_MODEL``; ``owner`` names the env in messages.
    """
    if isinstance(judge_url, Judge):
        return judge_url
    if judge_url is None or (isinstance(judge_url, str) and not judge_url.strip()):
        judge_url = os.environ.get(JUDGE_URL_ENV, "").strip() or None
        if judge_url is None:
            raise JudgeUnavailable(owner)
    model = model if model is not None else (os.environ.get(JUDGE_MODEL_ENV, "").strip() or None)
    if isinstance(judge_url, str) and not _is_url(judge_url):
        options = {"concurrency": concurrency, "timeout_s": timeout_s, **kwargs}
        if model is not None:
            options["model"] = model
        judge = judges.get(judge_url.strip()).make(**options)
        if not isinstance(judge, Judge):
            raise TypeError(
                f"judge {judge_url!r} made a {type(judge).__name__}, which has no acomplete/aclose"
            )
        return judge
    urls = [u for u in (judge_url.split(",") if isinstance(judge_url, str) else judge_url) if u.strip()]
    bad = [u for u in urls if not _is_url(u)]
    if bad:
        raise ValueError(f"judge_url: {bad[0]!r} is not an http(s) URL")
    return HTTPJudge(urls, model=model, concurrency=concurrency, timeout_s=timeout_s, **kwargs)


def _is_url(text: object) -> bool:
    return isinstance(text, str) and text.strip().lower().startswith(("http://", "https://"))
