"""What the double saw (calls, pushes, refusals, redeliveries) and the faults tests inject."""

from __future__ import annotations

import re
import threading
import time

from tests.doubles.github.model import Call, Fault, Push, Refusal


class Recorder:
    """Recorded traffic and injected faults; mixed into State."""

    def __init__(self) -> None:
        self._record_lock = threading.Lock()
        self._calls: list[Call] = []
        self.pushes: list[Push] = []
        self.refusals: list[Refusal] = []
        self.redeliveries: list[int] = []  # hook attempt ids POSTed to .../attempts
        self.faults: list[Fault] = []
        self.rate_used: dict[str, int] = {}
        self.errors: list[str] = []  # tracebacks of bugs in the double itself
        self._wake = threading.Event()  # set on reset: delayed requests stop waiting

    def record(self, call: Call) -> None:
        with self._record_lock:
            self._calls.append(call)

    def calls(
        self, method: str | None = None, path_prefix: str | None = None, surface: str | None = None
    ) -> list[Call]:
        """Recorded requests, oldest first; API paths have no /api/v3 prefix."""
        with self._record_lock:
            return [
                c
                for c in self._calls
                if (method is None or c.method == method.upper())
                and (path_prefix is None or c.path.startswith(path_prefix))
                and (surface is None or c.surface == surface)
            ]

    def graphql_calls(self, field: str | None = None) -> list[Call]:
        """Recorded POSTs to /api/graphql whose query names `field` (e.g. "resolveReviewThread"),
        oldest first; `identity.login` says whose token made each, `json` holds its variables."""
        return [
            c
            for c in self.calls("POST", "/api/graphql", surface="web")
            if field is None
            or (
                isinstance(c.json, dict)
                and re.search(rf"\b{re.escape(field)}\b", str(c.json.get("query", "")))
            )
        ]

    @property
    def merges(self) -> list[Refusal]:
        return [r for r in self.refusals if r.kind == "merge"]

    @property
    def approvals(self) -> list[Refusal]:
        return [r for r in self.refusals if r.kind == "approve"]

    def fail_next(
        self,
        n: int = 1,
        status: int = 500,
        *,
        method: str | None = None,
        path_prefix: str | None = None,
        headers: dict[str, str] | None = None,
        message: str | None = None,
    ) -> Fault:
        """Answer the next `n` matching requests (API path without /api/v3, or git path) with
        `status` instead of handling them."""
        fault = Fault(
            status,
            n,
            method.upper() if method else None,
            path_prefix,
            dict(headers or {}),
            {
                "message": message or ("Server Error" if status >= 500 else "Forbidden"),
                "documentation_url": "https://docs.github.com/rest",
            },
        )
        with self._record_lock:
            self.faults.append(fault)
        return fault

    def secondary_rate_limit(
        self,
        n: int = 1,
        retry_after: int = 1,
        *,
        method: str | None = None,
        path_prefix: str | None = None,
    ) -> Fault:
        """The next `n` matching requests get GitHub's secondary rate limit 403 + Retry-After."""
        return self.fail_next(
            n,
            403,
            method=method,
            path_prefix=path_prefix,
            headers={"Retry-After": str(retry_after)},
            message="You have exceeded a secondary rate limit. Please wait a few minutes "
            "before you try again.",
        )

    def delay_next(
        self,
        n: int = 1,
        seconds: float = 5.0,
        *,
        method: str | None = None,
        path_prefix: str | None = None,
    ) -> Fault:
        """Hold the next `n` matching requests for `seconds` before answering them normally
        (e.g. to kill a worker mid-request); the wait ends early when the double is reset."""
        fault = Fault(0, n, method.upper() if method else None, path_prefix, delay=seconds)
        with self._record_lock:
            self.faults.append(fault)
        return fault

    def pause(self, seconds: float, released: threading.Event | None = None) -> None:
        """Hold a request `seconds`, less when the double is reset or `released` is set."""
        deadline = time.monotonic() + seconds
        wake = self._wake  # reset() makes a new one and sets this one
        while not wake.is_set() and not (released is not None and released.is_set()):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            (released or wake).wait(min(left, 0.05))

    def take_fault(self, method: str, path: str) -> Fault | None:
        with self._record_lock:
            for fault in self.faults:
                if fault.remaining > 0 and fault.matches(method, path):
                    fault.remaining -= 1
                    return fault
        return None

    def count_rate(self, key: str) -> int:
        with self._record_lock:
            self.rate_used[key] = self.rate_used.get(key, 0) + 1
            return self.rate_used[key]
