"""The GitHub App manifest onloop registers itself with, the code conversion, and the .env file.

GitHub's manifest flow: https://docs.github.com/en/apps/sharing-github-apps/registering-a-github-app-from-a-manifest
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
from dotenv import dotenv_values

from app.core.publicurl import oauth_callback_url, webhook_url
from app.core.settings import Settings
from app.github.clients import USER_AGENT

TIMEOUT = 30
PERMISSIONS = {
    "contents": "write",
    "pull_requests": "write",
    "issues": "write",
    "checks": "write",
    "actions": "read",
    "metadata": "read",
}
EVENTS = [
    "issues",
    "issue_comment",
    "pull_request",
    "pull_request_review",
    "pull_request_review_comment",
    "check_suite",
    "workflow_run",
    "push",  # /insights: commits people add to onloop's branches, reverts on the default branch
]
# What the callback writes; refusing to overwrite any of them keeps a working App in place.
WRITTEN = (
    "ONLOOP_APP_ID",
    "ONLOOP_APP_SLUG",
    "ONLOOP_CLIENT_ID",
    "ONLOOP_CLIENT_SECRET",
    "ONLOOP_WEBHOOK_SECRET",
    "ONLOOP_PRIVATE_KEY_PATH",
)
LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$")  # GitHub user and org names
CODE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
NAME_LIMIT = 34  # GitHub refuses longer App names


class ConversionError(Exception):
    """GitHub did not turn the code into an App (expired, used already, or unreachable)."""


@dataclass(frozen=True)
class AppCredentials:
    """What POST /app-manifests/{code}/conversions answers; repr never shows the secrets."""

    id: int
    slug: str
    html_url: str
    client_id: str
    client_secret: str
    webhook_secret: str | None
    pem: str

    def __repr__(self) -> str:
        return f"AppCredentials(id={self.id}, slug={self.slug!r})"


def default_name(settings: Settings, org: str | None) -> str:
    host = (urlsplit(settings.public_url).hostname or "local").split(".")[0]
    return f"onloop-{org or host}"[:NAME_LIMIT]


def build_manifest(settings: Settings, name: str) -> dict[str, Any]:
    """The App onloop needs: its permissions, events and URLs under ONLOOP_PUBLIC_URL."""
    public = settings.public_url.rstrip("/")
    return {
        "name": name[:NAME_LIMIT],
        "url": public,
        "description": "Background coding agents: fixes issues, rebases and reviews PRs.",
        "hook_attributes": {"url": webhook_url(public), "active": True},
        "redirect_url": f"{public}/setup/callback",
        "callback_urls": [oauth_callback_url(public)],
        "request_oauth_on_install": True,
        "public": False,
        "default_permissions": dict(PERMISSIONS),
        "default_events": list(EVENTS),
    }


def new_app_url(settings: Settings, org: str | None) -> str:
    """Where the manifest is POSTed: the user's or an organisation's "new GitHub App" page."""
    base = settings.github_url.rstrip("/")
    if org:
        return f"{base}/organizations/{org}/settings/apps/new"
    return f"{base}/settings/apps/new"


def convert(settings: Settings, code: str) -> AppCredentials:
    """POST /app-manifests/{code}/conversions: the code (valid for an hour, once) for the App.

    Plain `requests`, not PyGithub: PyGithub's Requester logs response bodies at DEBUG, and this
    body is the App's private key and secrets. The endpoint needs no authentication.
    """
    if not CODE.match(code):
        raise ConversionError("the code is not one GitHub issues")
    url = f"{settings.github_api_url.rstrip('/')}/app-manifests/{code}/conversions"
    try:
        response = requests.post(
            url,
            headers={
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28",
                "User-Agent": USER_AGENT,
            },
            timeout=TIMEOUT,
        )
    except requests.RequestException as exc:
        raise ConversionError(f"GitHub is unreachable ({type(exc).__name__})") from None
    if response.status_code != 201:
        raise ConversionError(f"GitHub answered {response.status_code}")
    try:
        body = response.json()
        return AppCredentials(
            id=int(body["id"]),
            slug=str(body["slug"]),
            html_url=str(body.get("html_url") or ""),
            client_id=str(body["client_id"]),
            client_secret=str(body["client_secret"]),
            webhook_secret=body.get("webhook_secret") or None,
            pem=str(body["pem"]),
        )
    except (ValueError, KeyError, TypeError):
        raise ConversionError("GitHub's answer was not an App") from None


# --- the .env file -----------------------------------------------------------------------------
def existing(env_file: Path, names: tuple[str, ...] = WRITTEN) -> list[str]:
    """The names among `names` that already have a non-empty value in `env_file`."""
    if not env_file.exists():
        return []
    values = dotenv_values(env_file)
    return [n for n in names if (values.get(n) or "").strip()]


def _quoted(value: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_./:@+=,-]*", value):
        return value
    if "'" not in value:
        return f"'{value}'"
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def update_env(env_file: Path, values: dict[str, str]) -> None:
    """Set `values` in `env_file`, keeping every other line; atomically, mode 0600."""
    lines = env_file.read_text().splitlines() if env_file.exists() else []
    pending = dict(values)
    out = []
    for line in lines:
        m = re.match(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=", line)
        if m and m.group(1) in values:
            if m.group(1) in pending:
                out.append(f"{m.group(1)}={_quoted(pending.pop(m.group(1)))}")
            continue  # a second line for the same name would win: drop it
        out.append(line)
    out += [f"{name}={_quoted(value)}" for name, value in pending.items()]
    env_file.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=env_file.parent, prefix=".env.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(out) + "\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, env_file)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_private_key(path: Path, pem: str, overwrite: bool = False) -> Path:
    """Write the key with mode 0600 from the start. An existing file is replaced only when
    `overwrite`; otherwise the key goes next to it under a numbered name, never lost."""
    path.parent.mkdir(parents=True, exist_ok=True)
    candidates = [path] + [path.with_name(f"{path.stem}-{n}{path.suffix}") for n in range(1, 100)]
    for candidate in candidates:
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if overwrite else os.O_EXCL)
        try:
            fd = os.open(candidate, flags, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(pem if pem.endswith("\n") else pem + "\n")
        return candidate.resolve()
    raise FileExistsError(f"no free file name next to {path}")


def credentials_env(app: AppCredentials, key_path: Path) -> dict[str, str]:
    """The ONLOOP_* values for `app`; the webhook secret only when GitHub made one."""
    values = {
        "ONLOOP_APP_ID": str(app.id),
        "ONLOOP_APP_SLUG": app.slug,
        "ONLOOP_CLIENT_ID": app.client_id,
        "ONLOOP_CLIENT_SECRET": app.client_secret,
        "ONLOOP_PRIVATE_KEY_PATH": str(key_path),
    }
    if app.webhook_secret:
        values["ONLOOP_WEBHOOK_SECRET"] = app.webhook_secret
    return values
