"""One retrying JSON-over-HTTP client for every outbound call: the policy, the code verifier, judges.

``RetryingClient`` wraps an ``httpx.AsyncClient``:

- transport errors, timeouts, malformed JSON and the statuses in ``RETRY_STATUSES`` are retried with
  exponential backoff and jitter (a ``Retry-After`` header is honoured, up to ``max_backoff_s``);
- each attempt has an overall deadline, ``deadline_s``, covering connect, upload and every byte of
  the answer (httpx's timeouts are per operation: a server trickling one byte at a time never trips
  them);
- ``retry_budget_s`` bounds the time from the first attempt: no new attempt starts once it is spent;
- any other non-2xx answer raises at once; ``HTTPRequestError`` carries ``.status`` and ``.body`` so
  the caller can classify it (e.g. a "context length exceeded" 400 from an OpenAI-compatible server)::

      try:
          data = await client.request_json("POST", "/chat/completions", body)
      except HTTPRequestError as exc:
          if exc.status == 400 and "context length" in exc.body:
              raise ContextOverflowError(str(exc)) from exc
          raise

- ``stats`` counts requests, attempts, retries (by reason) and failures, for a run's summary.

``base_url`` may name several equivalent servers: each attempt goes to the least loaded one, and a
server that refused a connection is tried last for a few seconds, and with ``per_url_concurrency``
no server has more than that many requests in flight. One client serves one event loop
(httpx's connection pool is bound to the loop that first uses it).

The client keeps no cookies: it serves many callers at once, so one caller's session must never
ride on another's request. A caller with a session sends its cookie in ``headers`` and reads the
``Set-Cookie`` answers in ``exchange``'s ``Answer.headers``.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any, NamedTuple

import httpx

from .core import CascadeError

RETRY_STATUSES: frozenset[int] = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
"""Answers worth another attempt: overload, timeouts, conflicts and server errors."""
THROTTLE_STATUS = 429
"""Back-pressure: with a ``retry_budget_s``, retried until the budget is spent, not counted in ``max_retries``."""
DOWN_S = 5.0
"""How long a server that refused a connection is tried last."""
MAX_ERROR_BODY = 64 << 10
"""``HTTPRequestError.body`` keeps at most this many characters of the answer."""


class HTTPRequestError(CascadeError):
    """A request that failed for good: a non-retryable answer, or retries/budget exhausted.

    ``status`` and ``body`` are those of the last answer (``None`` when there was none: a transport
    error or a deadline); ``problem`` says what went wrong last; ``attempts`` how often it was tried.
    """

    def __init__(
        self,
        method: str,
        url: str,
        problem: str,
        *,
        attempts: int,
        status: int | None = None,
        body: str | None = None,
    ):
        self.method, self.url, self.problem, self.attempts = method, url, problem, attempts
        self.status, self.body = status, body
        plural = "" if attempts == 1 else "s"
        super().__init__(f"{method} {url}: {problem} (after {attempts} attempt{plural})")


class Answer(NamedTuple):
    """A successful exchange: the decoded JSON body and the answer's headers."""

    data: Any
    headers: httpx.Headers


class _Retry(Exception):
    """An attempt that failed in a way worth retrying."""

    def __init__(
        self,
        reason: str,
        problem: str,
        *,
        status: int | None = None,
        body: str | None = None,
        retry_after: float | None = None,
        down: bool = False,
    ):
        super().__init__(problem)
        self.reason, self.problem, self.status, self.body = reason, problem, status, body
        self.retry_after, self.down = retry_after, down


class RetryingClient:
    """Async JSON requests with retries, backoff, a per-attempt deadline and a retry budget.

    ``timeout_s``: httpx's per-operation timeout (read, write, pool); ``connect_timeout_s``: to
    connect; ``deadline_s``: the whole of one attempt (default ``timeout_s``); ``max_retries``:
    retries after the first attempt; ``backoff_s``: the first retry's delay, doubled each time up to
    ``max_backoff_s`` (times a random factor in [0.5, 1.5)); ``retry_budget_s``: no attempt starts
    later than this after the first (``None``: no limit); ``concurrency``: requests in flight at once;
    ``per_url_concurrency``: requests in flight at once on each server (``None``: no limit of its own).
    """

    def __init__(
        self,
        base_url: str | Sequence[str] = "",
        *,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 600.0,
        connect_timeout_s: float = 10.0,
        deadline_s: float | None = None,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        retry_budget_s: float | None = None,
        concurrency: int = 256,
        per_url_concurrency: int | None = None,
        retry_statuses: Collection[int] = RETRY_STATUSES,
    ):
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        self.base_urls = [u.strip().rstrip("/") for u in urls]
        if not self.base_urls or (len(self.base_urls) > 1 and not all(self.base_urls)):
            raise ValueError(f"RetryingClient: bad base_url {base_url!r}")
        if (
            max_retries < 0
            or concurrency < 1
            or (per_url_concurrency is not None and per_url_concurrency < 1)
        ):
            raise ValueError(
                "RetryingClient: max_retries must be >= 0 and concurrency and per_url_concurrency >= 1"
            )
        if per_url_concurrency is not None:  # a free slot then always has a server below its limit
            concurrency = min(concurrency, per_url_concurrency * len(self.base_urls))
        self.headers = dict(headers or {})
        self.timeout_s = timeout_s
        self.connect_timeout_s = min(connect_timeout_s, timeout_s)
        self.deadline_s = timeout_s if deadline_s is None else deadline_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.retry_budget_s = retry_budget_s
        self.concurrency = concurrency
        self.per_url_concurrency = per_url_concurrency
        self.retry_statuses = frozenset(retry_statuses)
        self.stats: Counter[str] = Counter()
        """``requests``, ``attempts``, ``succeeded``, ``retries``, ``failures``, and per reason
        ``retry.<reason>`` / ``failure.<reason>`` (``timeout``, ``deadline``, ``transport``,
        ``status_<code>``, ``malformed_json``, ``budget``)."""
        self._in_flight = [0] * len(self.base_urls)
        self._down_until = [0.0] * len(self.base_urls)
        self._slots = asyncio.Semaphore(concurrency)
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                headers=self.headers,
                cookies=CookieJar(DefaultCookiePolicy(allowed_domains=[])),  # a jar that keeps none
                timeout=httpx.Timeout(self.timeout_s, connect=self.connect_timeout_s),
                limits=httpx.Limits(
                    max_connections=self.concurrency, max_keepalive_connections=self.concurrency
                ),
            )
        return self._client

    def url(self, path: str, index: int = 0) -> str:
        """The full URL of ``path`` on server ``index`` (an absolute ``path`` is used as is)."""
        if path.startswith(("http://", "https://")):
            return path
        base = self.base_urls[index]
        return f"{base}/{path.lstrip('/')}" if path else base

    def _pick(self) -> int:
        """The server for the next attempt, chosen once a slot is held: below its own limit, up, least busy."""
        if len(self.base_urls) == 1:
            return 0
        now = time.monotonic()
        limit = self.per_url_concurrency
        return min(
            range(len(self.base_urls)),
            key=lambda i: (
                limit is not None and self._in_flight[i] >= limit,
                self._down_until[i] > now,
                self._in_flight[i],
                random.random(),
            ),
        )

    def _delay(self, retry: int, retry_after: float | None) -> float:
        delay = min(self.max_backoff_s, self.backoff_s * 2 ** (retry - 1)) * (0.5 + random.random())
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_backoff_s))
        return delay

    async def request_json(
        self, method: str, path: str, body: Any = None, *, headers: Mapping[str, str] | None = None
    ) -> Any:
        """Send ``body`` as JSON (none when ``None``) and return the decoded JSON answer.

        ``headers`` are added to this request's (e.g. a session's ``Cookie``). Raises
        ``HTTPRequestError`` on a non-retryable answer (at once) or when retries or the retry budget
        run out.
        """
        return (await self.exchange(method, path, body, headers=headers)).data

    async def exchange(
        self, method: str, path: str, body: Any = None, *, headers: Mapping[str, str] | None = None
    ) -> Answer:
        """``request_json``, with the answer's headers too (its ``Set-Cookie``, say)."""
        self.stats["requests"] += 1
        started: float | None = None
        attempts = counted = 0
        retry: _Retry
        while True:
            async with self._slots:
                index = self._pick()
                url = self.url(path, index)
                started = time.monotonic() if started is None else started
                attempts += 1
                self.stats["attempts"] += 1
                self._in_flight[index] += 1
                try:
                    answer = await self._attempt(method, url, body, attempts, headers)
                except _Retry as exc:
                    retry = exc
                except HTTPRequestError as exc:
                    self._fail(f"status_{exc.status}")
                    raise
                else:
                    self.stats["succeeded"] += 1
                    return answer
                finally:
                    self._in_flight[index] -= 1
            if retry.down:
                self._down_until[index] = time.monotonic() + DOWN_S
            if not (retry.status == THROTTLE_STATUS and self.retry_budget_s is not None):
                counted += 1  # back-pressure under a budget does not use up max_retries
            if counted > self.max_retries:
                self._fail(retry.reason)
                raise HTTPRequestError(
                    method, url, retry.problem, attempts=attempts, status=retry.status, body=retry.body
                )
            delay = self._delay(attempts, retry.retry_after)
            if self.retry_budget_s is not None and time.monotonic() + delay - started >= self.retry_budget_s:
                self._fail("budget")
                raise HTTPRequestError(
                    method,
                    url,
                    f"{retry.problem}; retry budget of {self.retry_budget_s:g} s spent",
                    attempts=attempts,
                    status=retry.status,
                    body=retry.body,
                )
            self.stats["retries"] += 1
            self.stats[f"retry.{retry.reason}"] += 1
            await asyncio.sleep(delay)

    async def _attempt(
        self, method: str, url: str, body: Any, attempts: int, headers: Mapping[str, str] | None
    ) -> Answer:
        try:
            async with asyncio.timeout(self.deadline_s):
                response = await self._http().request(method, url, json=body, headers=headers)
        except httpx.TimeoutException as exc:
            raise _Retry(
                "timeout", f"timed out ({type(exc).__name__})", down=isinstance(exc, httpx.ConnectTimeout)
            ) from None
        except httpx.TransportError as exc:
            raise _Retry(
                "transport",
                f"connection failed ({type(exc).__name__}: {exc})",
                down=isinstance(exc, httpx.ConnectError),
            ) from None
        except TimeoutError:
            raise _Retry(
                "deadline", f"no complete answer within the deadline of {self.deadline_s:g} s"
            ) from None
        status = response.status_code
        if status in self.retry_statuses:
            text = response.text[:MAX_ERROR_BODY]
            raise _Retry(
                f"status_{status}",
                f"HTTP {status}: {text[:200]}",
                status=status,
                body=text,
                retry_after=_retry_after(response),
            )
        if not 200 <= status < 300:
            text = response.text[:MAX_ERROR_BODY]
            raise HTTPRequestError(
                method, url, f"HTTP {status}: {text[:300]}", attempts=attempts, status=status, body=text
            )
        try:
            return Answer(response.json(), response.headers)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise _Retry(
                "malformed_json",
                f"malformed JSON in the answer: {response.text[:200]!r}",
                status=status,
                body=response.text[:MAX_ERROR_BODY],
            ) from None

    def _fail(self, reason: str) -> None:
        self.stats["failures"] += 1
        self.stats[f"failure.{reason}"] += 1

    def summary(self) -> str:
        """One line for a run's log: requests, retries and failures by reason."""
        s = self.stats

        def by(prefix: str) -> str:
            parts = [f"{k.removeprefix(prefix)} {v}" for k, v in sorted(s.items()) if k.startswith(prefix)]
            return f" ({', '.join(parts)})" if parts else ""

        return (
            f"{s['requests']} requests, {s['retries']} retries{by('retry.')}, "
            f"{s['failures']} failures{by('failure.')}"
        )

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def __aenter__(self) -> RetryingClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _retry_after(response: httpx.Response) -> float | None:
    """The ``Retry-After`` header in seconds (the HTTP-date form is ignored)."""
    try:
        value = float(response.headers.get("retry-after", ""))
    except ValueError:
        return None
    return value if value >= 0 else None
