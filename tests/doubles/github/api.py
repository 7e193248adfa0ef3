"""Request context, responses, GitHub-shaped errors, route matching and pagination for the API."""

from __future__ import annotations

import json
import re
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tests.doubles.github.model import ANONYMOUS, Identity, Repo

if TYPE_CHECKING:
    from tests.doubles.github.state import State

API_PREFIX = "/api/v3"
DOCS = "https://docs.github.com/rest"


class ApiError(Exception):
    """Raised by handlers; rendered as GitHub renders errors."""

    def __init__(
        self,
        status: int,
        message: str,
        errors: list[Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "message": self.message,
            "documentation_url": DOCS,
            "status": str(self.status),
        }
        if self.errors:
            out["errors"] = self.errors
        return out


def not_found() -> ApiError:
    return ApiError(404, "Not Found")


@dataclass
class Response:
    """JSON `body`, or bytes sent as they are (set Content-Type in `headers`)."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Ctx:
    """Everything a handler may look at."""

    state: State
    method: str
    path: str  # REST: without the /api/v3 prefix
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    raw_body: bytes
    base_url: str  # http://127.0.0.1:port
    params: dict[str, Any] = field(default_factory=dict)
    identity: Identity = ANONYMOUS

    @property
    def json(self) -> Any:
        if not self.raw_body:
            return None
        try:
            return json.loads(self.raw_body)
        except ValueError as exc:
            raise ApiError(400, "Problems parsing JSON") from exc

    def body_dict(self) -> dict[str, Any]:
        data = self.json
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise ApiError(400, "Problems parsing JSON")
        return data

    def arg(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[0] if values else default

    def api(self, path: str) -> str:
        return f"{self.base_url}{API_PREFIX}{path}"

    def web(self, path: str) -> str:
        return f"{self.base_url}{path}"

    def repo(self) -> Repo:
        """The repository named by the route's {owner}/{repo}, or 404."""
        found = self.state.find_repo(f"{self.params['owner']}/{self.params['repo']}")
        if found is None:
            raise not_found()
        return found


Handler = Callable[[Ctx], Response]


@dataclass
class Route:
    method: str
    pattern: str
    handler: Handler
    regex: re.Pattern[str] = field(init=False)
    ints: set[str] = field(init=False)

    def __post_init__(self) -> None:
        def group(m: re.Match[str]) -> str:
            name, _, kind = m.group(1).partition(":")
            body = {"int": r"\d+", "path": r".*"}.get(kind, r"[^/]+")
            return f"(?P<{name}>{body})"

        self.regex = re.compile("^" + re.sub(r"\{([^}]+)\}", group, self.pattern) + "$")
        self.ints = set(re.findall(r"\{(\w+):int\}", self.pattern))

    def match(self, path: str) -> dict[str, Any] | None:
        m = self.regex.match(path)
        if m is None:
            return None
        return {
            k: int(v) if k in self.ints else urllib.parse.unquote(v)
            for k, v in m.groupdict().items()
        }


def find_route(routes: list[Route], method: str, path: str) -> tuple[Route, dict[str, Any]]:
    for route in routes:
        if route.method == method and (params := route.match(path)) is not None:
            return route, params
    raise not_found()


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def paginate(ctx: Ctx, items: list[Any]) -> Response:
    """A page of `items` by ?page=&per_page= with GitHub's Link header."""
    try:
        per_page = max(1, min(100, int(ctx.arg("per_page", "30") or 30)))
        page = max(1, int(ctx.arg("page", "1") or 1))
    except ValueError as exc:
        raise ApiError(422, "Invalid pagination parameters") from exc
    last = max(1, -(-len(items) // per_page))
    links = []

    def link(n: int, rel: str) -> str:
        query = {k: v[0] for k, v in ctx.query.items()} | {
            "per_page": str(per_page),
            "page": str(n),
        }
        return f'<{ctx.api(ctx.path)}?{urllib.parse.urlencode(query)}>; rel="{rel}"'

    if page < last:
        links += [link(page + 1, "next"), link(last, "last")]
    if page > 1:
        links += [link(1, "first"), link(page - 1, "prev")]
    headers = {"Link": ", ".join(links)} if links else {}
    return Response(200, items[(page - 1) * per_page : page * per_page], headers)


def rate_headers(used: int, limit: int = 5000) -> dict[str, str]:
    return {
        "X-RateLimit-Limit": str(limit),
        "X-RateLimit-Remaining": str(max(0, limit - used)),
        "X-RateLimit-Reset": str(int(time.time()) + 3600),
        "X-RateLimit-Used": str(used),
        "X-RateLimit-Resource": "core",
    }
