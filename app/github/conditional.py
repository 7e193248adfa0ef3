"""Conditional reads: a repeated GET sends the last answer's ETag, and GitHub's 304 costs no
rate limit. The cache is the caller's: none is kept per process."""

from __future__ import annotations

import base64
import json
import threading
import urllib.parse
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from github import Github, GithubException
from github.GithubObject import GithubObject

from app.github.transport import who_of


@dataclass(frozen=True)
class _Cached:
    etag: str
    data: Any


class ETagCache:
    """Responses of repeated reads by (identity, URL); a conditional request that GitHub
    answers 304 does not count against the rate limit
    (https://docs.github.com/en/rest/using-the-rest-api/best-practices-for-using-the-rest-api#use-conditional-requests-if-appropriate)."""

    def __init__(self, size: int = 512) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, str], _Cached] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0

    def get(self, key: tuple[str, str]) -> _Cached | None:
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
            return item

    def put(self, key: tuple[str, str], item: _Cached) -> None:
        with self._lock:
            self._items[key] = item
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


def conditional_get(
    client: Github | GithubObject,
    url: str,
    parameters: dict[str, Any] | None,
    cache: ETagCache,
) -> Any:
    """GET `url` as JSON through `client` (a Github, or any object it made, e.g. a
    Repository), sending the ETag of the last answer this identity got for it; a 304 returns
    that answer again. Raises GithubException like PyGithub on an error status."""
    requester = client.requester
    who = who_of(requester)
    query = urllib.parse.urlencode(sorted((parameters or {}).items()))
    key = (who.identity if who else "anonymous", f"{url}?{query}")
    cached = cache.get(key)
    headers = {"If-None-Match": cached.etag} if cached else {}
    status, response_headers, body = requester.requestJson("GET", url, parameters, headers)
    if status == 304 and cached is not None:
        cache.hits += 1
        return cached.data
    data = json.loads(body) if body else None
    if status >= 400:
        raise requester.createException(status, response_headers, data or {})
    etag = response_headers.get("etag")
    if etag:
        cache.put(key, _Cached(etag, data))
    return data


def conditional_contents(
    client: Github | GithubObject, repo: str, path: str, ref: str, cache: ETagCache
) -> tuple[str, str] | None:
    """A file's text and blob sha at `ref` through a conditional read; None when absent."""
    try:
        data = conditional_get(client, f"/repos/{repo}/contents/{path}", {"ref": ref}, cache)
    except GithubException as exc:
        if exc.status == 404:
            return None
        raise
    if not isinstance(data, dict) or data.get("type") != "file":
        return None
    text = base64.b64decode(data.get("content") or "").decode("utf-8", "replace")
    return text, str(data.get("sha"))
