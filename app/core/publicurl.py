"""ONLOOP_PUBLIC_URL checked, and the App's addresses built on it."""

from __future__ import annotations

from urllib.parse import urlsplit


def public_url_problem(url: str) -> str | None:
    """Why `url` cannot be onloop's public URL (GitHub builds the App's addresses on it)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return "must start with https:// (or http:// for a local try-out)"
    if not parts.hostname:
        return "has no host name"
    if parts.query or parts.fragment or parts.username or parts.password:
        return "must have no query, fragment or credentials"
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError:
        return "has a port that is not a number from 1 to 65535"
    return None


def webhook_url(public_url: str) -> str:
    return public_url.rstrip("/") + "/webhooks/github"


def oauth_callback_url(public_url: str) -> str:
    return public_url.rstrip("/") + "/oauth/callback"
