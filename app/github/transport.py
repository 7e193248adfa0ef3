"""How onloop's PyGithub clients behave on the wire: rate-limit waits, bounded writes,
write observers (the audit log) and conditional reads with ETags."""

from __future__ import annotations

import logging
import time
import urllib.parse
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from github import GithubRetry
from github.GithubException import RateLimitExceededExceedsMaxWait
from github.Requester import Requester
from urllib3.util.retry import Retry

from app.core.telemetry import Telemetry
from app.github.write_slots import WriteSlots

log = logging.getLogger("onloop.github")

# A job never sleeps longer than this inside one request; past it the request fails with
# RateLimitExceededExceedsMaxWait and the job can be queued again instead.
MAX_RATE_LIMIT_WAIT = 900.0
_READS = frozenset({"GET", "HEAD"})
CLI_TIMEOUT = 10  # seconds a command-line check waits for one GitHub answer
# Set inside `fail_fast()`: the timeout that clients made there use, and no retries.
_fail_fast: ContextVar[int | None] = ContextVar("onloop_github_fail_fast", default=None)


@contextmanager
def fail_fast(timeout: int = CLI_TIMEOUT) -> Iterator[None]:
    """Clients made in this context send each request once and wait at most `timeout`
    seconds for it. A person at the command line wants an answer now; a job's client rides
    out an outage with retries and backoff instead, which takes minutes to give up."""
    token = _fail_fast.set(timeout)
    try:
        yield
    finally:
        _fail_fast.reset(token)


class RateLimitRetry(GithubRetry):
    """PyGithub's retry (secondary limits with Retry-After, 5xx), plus the primary limit:
    a 403 or 429 with `x-ratelimit-remaining: 0` waits until `x-ratelimit-reset`
    (https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api#exceeding-the-rate-limit)."""

    def __init__(self, **kwargs: Any) -> None:
        if _fail_fast.get() is not None:
            # Only the first Retry's defaults: urllib3 copies it with its counters given.
            kwargs.setdefault("total", 0)
            kwargs.setdefault("raise_on_status", False)  # a 5xx is GitHub's answer, shown so
        kwargs.setdefault("status_forcelist", [429, *range(500, 600)])
        kwargs.setdefault("max_rate_limit_wait", MAX_RATE_LIMIT_WAIT)
        kwargs.setdefault("total", 10)
        kwargs.setdefault("backoff_factor", 0.5)
        super().__init__(**kwargs)

    def increment(  # type: ignore[override]
        self,
        method: str | None = None,
        url: str | None = None,
        response: Any = None,
        error: Exception | None = None,
        _pool: Any = None,
        _stacktrace: Any = None,
    ) -> Retry:
        wait = primary_limit_wait(response)
        if wait is None:
            return super().increment(method, url, response, error, _pool, _stacktrace)
        limit = self.max_rate_limit_wait
        if limit is not None and wait > limit:
            raise RateLimitExceededExceedsMaxWait(
                response.status,
                {"message": "primary rate limit"},
                dict(response.headers),
                wait=wait,
            )
        retry = Retry.increment(self, method, url, response, error, _pool, _stacktrace)
        # urllib3 sleeps get_backoff_time() when there is no Retry-After (GithubRetry does
        # the same for the limits it knows).
        retry.get_backoff_time = lambda: wait  # type: ignore[method-assign]
        log.info("GitHub primary rate limit: waiting %.0fs for x-ratelimit-reset", wait)
        return retry


def primary_limit_wait(response: Any, now: float | None = None) -> float | None:
    """Seconds until `x-ratelimit-reset` when `response` says the primary limit is used up
    (and gives no Retry-After, which wins when present); None otherwise."""
    if response is None or response.status not in (403, 429):
        return None
    headers = response.headers
    if headers.get("Retry-After") or headers.get("x-ratelimit-remaining") != "0":
        return None
    reset = headers.get("x-ratelimit-reset")
    if reset is None or not str(reset).isdigit():
        return None
    return max(0.0, int(reset) - (now or time.time())) + 1.0


@dataclass(frozen=True)
class Who:
    """Whose credentials a client carries: the token kind and identity the audit log names,
    and the key its write slots are counted under. Never the token itself."""

    kind: str  # "app" | "installation" | "user"
    identity: str  # "onloop[bot]", a user's login, "app:<id>"
    lock_key: str  # "installation:<id>", "user:<login>", "app:<id>"


@dataclass(frozen=True)
class GitHubWrite:
    """One write request as onloop made it (after PyGithub's retries)."""

    method: str
    path: str  # the REST path without the API prefix and query: /repos/o/r/issues/1/comments
    status: int  # 0 when no answer came back
    token_kind: str
    identity: str


WriteObserver = Callable[[GitHubWrite], None]
_observers: ContextVar[tuple[WriteObserver, ...]] = ContextVar("onloop_github_writes", default=())


@contextmanager
def observe_writes(observer: WriteObserver) -> Iterator[None]:
    """Call `observer` for every non-GET request made by onloop's clients in this context
    (this thread, or task), whichever client makes it."""
    token = _observers.set((*_observers.get(), observer))
    try:
        yield
    finally:
        _observers.reset(token)


def _notify(write: GitHubWrite) -> None:
    for observer in _observers.get():
        try:
            observer(write)
        except Exception:
            log.exception("a GitHub write observer failed")


_who: weakref.WeakKeyDictionary[Requester, Who] = weakref.WeakKeyDictionary()


def who_of(requester: Requester) -> Who | None:
    """Who an instrumented client acts as (None for a client onloop did not make)."""
    return _who.get(requester)


def api_path(url: str, base_url: str) -> str:
    """`url` (absolute, or relative to the API) as a REST path without prefix or query."""
    path = urllib.parse.urlsplit(url).path
    prefix = urllib.parse.urlsplit(base_url).path.rstrip("/")
    if prefix and (path == prefix or path.startswith(prefix + "/")):
        path = path[len(prefix) :] or "/"
    return path


def _measure(meter: Telemetry | None, verb: str, result: Any, kind: str) -> None:
    """Count the call and keep the rate limit GitHub says is left for this kind of token."""
    if meter is None:
        return
    meter.inc("github_api_calls", method=verb.upper(), status=int(result[0]))
    headers = {str(k).lower(): v for k, v in (result[1] or {}).items()}
    remaining = headers.get("x-ratelimit-remaining")
    if remaining is not None and str(remaining).isdigit():
        meter.set("github_rate_limit_remaining", float(remaining), token=kind)


def instrument(
    requester: Requester, who: Who, writes: WriteSlots, meter: Telemetry | None = None
) -> Requester:
    """Bound (app.github.write_slots) and report `requester`'s writes. PyGithub has no
    per-request hook (https://github.com/PyGithub/PyGithub/issues/2865), so its three send methods
    are wrapped on this instance; every *AndCheck method and object update goes through them.
    Requesters PyGithub derives with another laziness or API version are wrapped too."""
    _who[requester] = who
    quick = _fail_fast.get()
    if quick is not None and hasattr(requester, "_Requester__timeout"):
        # PyGithub has no setter; its connections are made lazily, so they take this one.
        requester._Requester__timeout = quick
    base_url = requester.base_url
    for name in ("requestJson", "requestMultipart", "requestBlob"):
        send = getattr(requester, name)

        def request(
            verb: str, url: str, *args: Any, _send: Any = send, **kwargs: Any
        ) -> tuple[int, dict[str, Any], str]:
            if verb.upper() in _READS:
                result = _send(verb, url, *args, **kwargs)
                _measure(meter, verb, result, who.kind)
                return result
            status = 0
            try:
                with writes.hold(who.lock_key):
                    result = _send(verb, url, *args, **kwargs)
                status = int(result[0])
                _measure(meter, verb, result, who.kind)
                return result
            finally:
                path = api_path(url, base_url)
                _notify(GitHubWrite(verb.upper(), path, status, who.kind, who.identity))

        setattr(requester, name, request)
    for name in ("withLazy", "withApiVersion"):
        derive = getattr(requester, name)

        def derived(*args: Any, _derive: Any = derive, **kwargs: Any) -> Requester:
            new: Requester = _derive(*args, **kwargs)
            return new if new is requester else instrument(new, who, writes, meter)

        setattr(requester, name, derived)
    return requester
