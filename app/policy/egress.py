"""`sandbox.egress`: which package registries setup may reach, and narrowing by the org's list."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, field_validator

IndexKind = Literal["pip", "npm"]


@dataclass(frozen=True)
class Registry:
    """A package registry named in the config: the hosts it needs and the index it is."""

    hosts: tuple[tuple[str, int], ...]
    pip: str | None = None
    npm: str | None = None


REGISTRIES: dict[str, Registry] = {
    "pypi": Registry(
        (("pypi.org", 443), ("files.pythonhosted.org", 443)), pip="https://pypi.org/simple/"
    ),
    "npm": Registry((("registry.npmjs.org", 443),), npm="https://registry.npmjs.org/"),
}
# What setup may reach when the organisation's config says nothing.
DEFAULT_EGRESS: tuple[str, ...] = ("pypi", "npm")


def check_url(url: str) -> str:
    """An http(s) URL with a host, as given; ValueError otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is neither a registry name ({', '.join(REGISTRIES)}) nor an URL")
    if parts.username or parts.password:
        raise ValueError(
            f"{parts.hostname}: no credentials in sandbox.egress (the proxy adds them)"
        )
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise ValueError(f"{url!r}: {exc}") from None
    return url


class EgressIndex(BaseModel):
    """An URL entry that is also the pip index or npm registry setup should use."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str
    index: IndexKind | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_url(value)


EgressEntry = EgressIndex | str


def check_entry(entry: EgressEntry) -> EgressEntry:
    """A registry name or an http(s) URL (or an EgressIndex); ValueError otherwise."""
    if isinstance(entry, EgressIndex):
        return entry
    if entry.strip().lower() in REGISTRIES:
        return entry.strip().lower()
    return check_url(entry.strip())


def entry_url(entry: EgressEntry) -> str | None:
    """The URL of an URL entry; None for a registry name."""
    if isinstance(entry, EgressIndex):
        return entry.url
    return None if entry in REGISTRIES else entry


def destinations(entry: EgressEntry) -> set[tuple[str, int]]:
    """The (host, port) pairs an entry allows."""
    url = entry_url(entry)
    if url is None:
        assert isinstance(entry, str)
        return set(REGISTRIES[entry].hosts)
    parts = urlsplit(url)
    default = 443 if parts.scheme == "https" else 80
    return {((parts.hostname or "").rstrip(".").lower(), parts.port or default)}


def describe(entry: EgressEntry) -> str:
    """The entry as a person wrote it."""
    return entry_url(entry) or str(entry)


def narrow_egress(
    org: Sequence[EgressEntry] | None, repo: Sequence[EgressEntry] | None
) -> tuple[list[EgressEntry], list[str]]:
    """The repository's list narrowed to what the organisation allows: (kept, dropped).

    `org` None means DEFAULT_EGRESS; `repo` None means "the organisation's list". A repository
    entry is kept when every host it needs is allowed by the organisation's entries (so an
    URL on pypi.org is covered by `pypi`, and `pypi` by URLs for both of its hosts); the
    others are dropped and named, for the job to report. A repository can narrow, never widen.
    """
    allowed_entries = [check_entry(e) for e in (DEFAULT_EGRESS if org is None else org)]
    if repo is None:
        return allowed_entries, []
    allowed: set[tuple[str, int]] = set()
    for entry in allowed_entries:
        allowed |= destinations(entry)
    kept: list[EgressEntry] = []
    dropped: list[str] = []
    for entry in repo:
        checked = check_entry(entry)
        if destinations(checked) <= allowed:
            kept.append(checked)
        else:
            dropped.append(describe(checked))
    return kept, dropped
