"""The /app endpoints: the app, its installations, installation tokens and webhook deliveries."""

from __future__ import annotations

import time
import urllib.parse
from typing import Any

from tests.doubles.github import shapes
from tests.doubles.github.api import ApiError, Ctx, Response, iso, not_found, paginate
from tests.doubles.github.auth import LEVELS, authorize, covers, require_app
from tests.doubles.github.model import Delivery, Installation


def get_app(ctx: Ctx) -> Response:
    require_app(ctx.identity)
    return Response(200, app_shape(ctx))


def list_installations(ctx: Ctx) -> Response:
    require_app(ctx.identity)
    items = sorted(ctx.state.installations.values(), key=lambda i: i.id)
    return paginate(ctx, [installation_shape(ctx, i) for i in items])


def _installation(ctx: Ctx) -> Installation:
    inst = ctx.state.installations.get(ctx.params["id"])
    if inst is None:
        raise not_found()
    return inst


def get_installation(ctx: Ctx) -> Response:
    require_app(ctx.identity)
    return Response(200, installation_shape(ctx, _installation(ctx)))


def _invalid(message: str) -> ApiError:
    return ApiError(422, message)


def create_access_token(ctx: Ctx) -> Response:
    """POST /app/installations/{id}/access_tokens, optionally narrowed like GitHub allows."""
    require_app(ctx.identity)
    inst = _installation(ctx)
    if inst.suspended:
        raise ApiError(403, "This installation has been suspended")
    body = ctx.body_dict()
    wanted: list[Any] = [f"{inst.account}/{n}" for n in body.get("repositories") or []]
    wanted += [
        next((r.full_name for r in ctx.state.repos.values() if r.id == rid), f"#{rid}")
        for rid in body.get("repository_ids") or []
    ]
    repos = []
    for name in wanted:
        repo = ctx.state.find_repo(name) if "/" in name and name.count("/") == 1 else None
        if repo is None or not covers(inst, repo):
            raise _invalid(
                "There is at least one repository that does not exist or is not "
                "accessible to the parent installation."
            )
        repos.append(repo)
    perms: dict[str, str] | None = body.get("permissions") or None
    if perms is not None:
        for name, level in perms.items():
            have = inst.permissions.get(name)
            if level not in LEVELS or have is None or LEVELS[level] > LEVELS[have]:
                raise _invalid("The permissions requested are not granted to this installation.")
    token = ctx.state.issue_installation_token(
        inst.id, repositories=[r.full_name for r in repos] or None, permissions=perms
    )
    out: dict[str, Any] = {
        "token": token.value,
        "expires_at": iso(token.expires_at),
        "permissions": token.permissions or inst.permissions,
        "repository_selection": "selected" if repos else inst.repository_selection,
    }
    if repos:
        out["repositories"] = [shapes.repo(ctx, r, full=False) for r in repos]
    return Response(201, out)


def installation_repositories(ctx: Ctx) -> Response:
    """GET /installation/repositories with an installation token."""
    ident = ctx.identity
    if ident.kind != "installation":
        raise ApiError(
            403,
            "Resource not accessible by personal access token"
            if ident.kind == "user"
            else "Requires authentication",
        )
    inst = ctx.state.installations[ident.installation_id or 0]
    repos = []
    for repo in sorted(ctx.state.repos.values(), key=lambda r: r.id):
        try:
            authorize(ctx.state, ident, repo, "metadata", "read")
        except ApiError:
            continue
        if covers(inst, repo):
            repos.append(shapes.repo(ctx, repo, full=False))
    page = paginate(ctx, repos)
    page.body = {
        "total_count": len(repos),
        "repositories": page.body,
        "repository_selection": inst.repository_selection,
    }
    return page


def _ordered(ctx: Ctx) -> list[Delivery]:
    return sorted(ctx.state.deliveries, key=lambda d: (d.delivered_at, d.id), reverse=True)


def list_deliveries(ctx: Ctx) -> Response:
    """GET /app/hook/deliveries: newest first, cursor pagination with a Link header."""
    require_app(ctx.identity)
    try:
        per_page = max(1, min(100, int(ctx.arg("per_page", "30") or 30)))
    except ValueError as exc:
        raise ApiError(422, "Invalid per_page") from exc
    items = _ordered(ctx)
    cursor = ctx.arg("cursor")
    if cursor:
        ids = [f"v1_{d.id}" for d in items]
        if cursor not in ids:
            raise ApiError(422, "Invalid cursor")
        items = items[ids.index(cursor) + 1 :]
    page, rest = items[:per_page], items[per_page:]
    headers = {}
    if rest:
        query = urllib.parse.urlencode({"per_page": per_page, "cursor": f"v1_{page[-1].id}"})
        headers["Link"] = f'<{ctx.api("/app/hook/deliveries")}?{query}>; rel="next"'
    return Response(200, [delivery_shape(d) for d in page], headers)


def _delivery(ctx: Ctx) -> Delivery:
    found = next((d for d in ctx.state.deliveries if d.id == ctx.params["id"]), None)
    if found is None:
        raise not_found()
    return found


def get_delivery(ctx: Ctx) -> Response:
    require_app(ctx.identity)
    d = _delivery(ctx)
    out = delivery_shape(d)
    out["request"] = {
        "headers": {"X-GitHub-Event": d.event, "X-GitHub-Delivery": d.guid},
        "payload": d.payload,
    }
    out["response"] = {"headers": {}, "payload": ""}
    return Response(200, out)


def redeliver(ctx: Ctx) -> Response:
    """POST /app/hook/deliveries/{id}/attempts: recorded, and listed as a new redelivery."""
    require_app(ctx.identity)
    d = _delivery(ctx)
    ctx.state.redeliveries.append(d.id)
    ctx.state.add_delivery(
        d.event,
        d.action,
        delivered_at=time.time(),
        guid=d.guid,
        redelivery=True,
        payload=d.payload,
        installation_id=d.installation_id,
        repository_id=d.repository_id,
    )
    return Response(202, {})


def app_shape(ctx: Ctx) -> dict[str, Any]:
    a = ctx.state.app
    return {
        "id": a.id,
        "slug": a.slug,
        "node_id": shapes.node_id("A", a.id),
        "name": a.name,
        "owner": shapes.user(ctx, a.owner),
        "description": "",
        "client_id": a.client_id,
        "external_url": ctx.web("/"),
        "html_url": ctx.web(f"/apps/{a.slug}"),
        "created_at": "2024-01-01T00:00:00Z",
        "updated_at": "2024-01-01T00:00:00Z",
        "permissions": a.permissions,
        "events": a.events,
        "installations_count": len(ctx.state.installations),
    }


def installation_shape(ctx: Ctx, i: Installation) -> dict[str, Any]:
    account = ctx.state.user(i.account)
    return {
        "id": i.id,
        "account": shapes.user(ctx, account),
        "app_id": ctx.state.app.id,
        "app_slug": ctx.state.app.slug,
        "client_id": ctx.state.app.client_id,
        "target_id": account.id,
        "target_type": "Organization" if account.type == "Organization" else "User",
        "permissions": i.permissions,
        "events": i.events,
        "repository_selection": i.repository_selection,
        "access_tokens_url": ctx.api(f"/app/installations/{i.id}/access_tokens"),
        "repositories_url": ctx.api("/installation/repositories"),
        "html_url": ctx.web(f"/settings/installations/{i.id}"),
        "created_at": "2024-01-01T00:00:00Z",
        "updated_at": "2024-01-01T00:00:00Z",
        "suspended_at": None,
        "suspended_by": None,
        "single_file_name": None,
        "has_multiple_single_files": False,
        "single_file_paths": [],
    }


def delivery_shape(d: Delivery) -> dict[str, Any]:
    return {
        "id": d.id,
        "guid": d.guid,
        "delivered_at": iso(d.delivered_at),
        "redelivery": d.redelivery,
        "duration": d.duration,
        "status": "OK" if 200 <= d.status_code < 300 else f"Invalid HTTP Response: {d.status_code}",
        "status_code": d.status_code,
        "event": d.event,
        "action": d.action,
        "installation_id": d.installation_id,
        "repository_id": d.repository_id,
        "throttled_at": None,
    }
