"""The GitHub App manifest flow: the "new App" pages take a manifest, the API converts the code.

The pages stand in for the person who clicks "Create GitHub App": they create the App at once
and redirect to the manifest's redirect_url with a one-hour, one-time code and the state
(https://docs.github.com/en/apps/sharing-github-apps/registering-a-github-app-from-a-manifest).
POST /app-manifests/{code}/conversions needs no credentials and answers the App with its
client_id, client_secret, webhook_secret and pem
(https://docs.github.com/en/rest/apps/apps#create-a-github-app-from-a-manifest).
"""

from __future__ import annotations

import json
import re
import secrets
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.doubles.github import shapes
from tests.doubles.github.api import ApiError, Ctx, Response, not_found
from tests.doubles.github.model import App

if TYPE_CHECKING:
    from tests.doubles.github.state import State

CODE_TTL = 3600


@dataclass
class Created:
    """An App made from a manifest; `pem` is handed out once, by the conversion."""

    app: App
    manifest: dict[str, Any]
    pem: str
    code: str
    issued_at: float
    converted: bool = False


@dataclass
class ManifestBook:
    root: Path
    submitted: list[dict[str, Any]] = field(default_factory=list)  # every manifest POSTed
    created: dict[str, Created] = field(default_factory=dict)  # by code


def book(state: State) -> ManifestBook:
    """This world's manifests (a reset gives the double a new root, and so a new book)."""
    found: ManifestBook | None = state.__dict__.get("_manifest_book")
    if found is None or found.root != state.root:
        found = ManifestBook(state.root)
        state.__dict__["_manifest_book"] = found
    return found


@contextmanager
def acting_as(state: State, created: Created) -> Iterator[App]:
    """Let the double be the App made from a manifest (its key signs JWTs), then restore."""
    with state.lock:
        before, state.app = state.app, created.app
    try:
        yield created.app
    finally:
        with state.lock:
            state.app = before


def _page(status: int, text: str) -> Response:
    return Response(status, f"<!doctype html><p>{text}</p>".encode())


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "app"


def new_app(ctx: Ctx) -> Response:
    """POST /settings/apps/new or /organizations/{org}/settings/apps/new, form field `manifest`."""
    form = urllib.parse.parse_qs(ctx.raw_body.decode("utf-8", "replace"))
    raw = (form.get("manifest") or [""])[0]
    try:
        manifest = json.loads(raw)
    except ValueError:
        return _page(422, "Invalid GitHub App configuration: manifest is not JSON")
    if not isinstance(manifest, dict):
        return _page(422, "Invalid GitHub App configuration")
    book(ctx.state).submitted.append(manifest)
    hook = manifest.get("hook_attributes") or {}
    problems = [
        name
        for name, ok in (
            ("url", isinstance(manifest.get("url"), str) and manifest["url"].startswith("http")),
            ("hook_attributes.url", not hook.get("active", True) or bool(hook.get("url"))),
            ("redirect_url", str(manifest.get("redirect_url", "")).startswith("http")),
        )
        if not ok
    ]
    if problems:
        return _page(422, "Invalid GitHub App configuration: " + ", ".join(problems))
    owner = ctx.params.get("org") or ctx.state.app.owner
    ctx.state.user(owner, type="Organization" if ctx.params.get("org") else "User")
    created = _create(ctx.state, manifest, owner)
    query = {"code": created.code}
    if ctx.arg("state") is not None:
        query["state"] = ctx.arg("state") or ""
    return Response(302, b"", {"Location": _with_query(manifest["redirect_url"], query)})


def _with_query(url: str, params: dict[str, str]) -> str:
    return url + ("&" if "?" in url else "?") + urllib.parse.urlencode(params)


def _create(state: State, manifest: dict[str, Any], owner: str) -> Created:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    app_id = state.next_id()
    name = str(manifest.get("name") or f"app-{app_id}")
    app = App(
        app_id,
        _slug(name),
        name,
        owner,
        f"Iv23li{secrets.token_hex(7)}",
        secrets.token_hex(20),
        secrets.token_hex(20),  # GitHub generates the webhook secret
        state.root / f"manifest-app-{app_id}.pem",  # not written: only the conversion hands it out
        public,
        dict(manifest.get("default_permissions") or {}),
        list(manifest.get("default_events") or []),
    )
    created = Created(app, manifest, pem, secrets.token_hex(20), state.now())
    book(state).created[created.code] = created
    return created


def convert(ctx: Ctx) -> Response:
    """POST /app-manifests/{code}/conversions: once, within the hour; else 404 like GitHub."""
    created = book(ctx.state).created.get(ctx.params["code"])
    if created is None or created.converted:
        raise not_found()
    if ctx.state.now() - created.issued_at > CODE_TTL:
        raise ApiError(404, "Not Found")
    created.converted = True
    a = created.app
    hook = created.manifest.get("hook_attributes") or {}
    return Response(
        201,
        {
            "id": a.id,
            "slug": a.slug,
            "node_id": shapes.node_id("A", a.id),
            "owner": shapes.user(ctx, ctx.state.user(a.owner)),
            "name": a.name,
            "description": created.manifest.get("description") or "",
            "external_url": created.manifest.get("url"),
            "html_url": ctx.web(f"/apps/{a.slug}"),
            "created_at": "2024-01-01T00:00:00Z",
            "updated_at": "2024-01-01T00:00:00Z",
            "permissions": {"metadata": "read", **a.permissions},
            "events": a.events,
            "installations_count": 0,
            "client_id": a.client_id,
            "client_secret": a.client_secret,
            "webhook_secret": a.webhook_secret if hook.get("active", True) else None,
            "pem": created.pem,
        },
    )
