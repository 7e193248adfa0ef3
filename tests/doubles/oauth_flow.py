"""A person signing in through onloop's OAuth pages and the GitHub double, as a browser would."""

from __future__ import annotations

import urllib.parse
from typing import Any

import requests

from tests.doubles.github.double import GitHubDouble


def follow(client: Any, double: GitHubDouble, login: str) -> tuple[Any, str]:
    """GET /oauth/login on onloop, then the double's authorize page as `login` (who is signed
    in there); the answer of the last hop and the callback URL it sent the browser to. The
    Flask test client keeps onloop's cookie between the hops, as a browser does."""
    start = client.get("/oauth/login")
    assert start.status_code == 302, start.get_data(as_text=True)
    authorize = start.headers["Location"]
    assert authorize.startswith(double.url + "/login/oauth/authorize?"), authorize
    double.oauth.user = login
    page = requests.get(authorize, allow_redirects=False, timeout=10)
    assert page.status_code == 302, page.text
    callback = page.headers["Location"]
    return client.get(callback), callback


def sign_in(client: Any, double: GitHubDouble, login: str) -> Any:
    """The whole flow for `login`; onloop's callback page, checked to be the success page."""
    page, _ = follow(client, double, login)
    assert page.status_code == 200, page.get_data(as_text=True)
    return page


def query(url: str) -> dict[str, str]:
    return {
        k: v[0]
        for k, v in urllib.parse.parse_qs(
            urllib.parse.urlsplit(url).query, keep_blank_values=True
        ).items()
    }


def authorization_revoked(double: GitHubDouble, login: str) -> dict[str, Any]:
    """`github_app_authorization` revoked: GitHub sends only the action and the person
    (https://docs.github.com/en/webhooks/webhook-events-and-payloads#github_app_authorization);
    no fixture exists, so it is built in the shape of `simple-user-webhooks`."""
    user = double.user(login)
    return {
        "action": "revoked",
        "sender": {
            "login": user.login,
            "id": user.id,
            "node_id": f"MDQ6VXNlcj{user.id}",
            "avatar_url": f"{double.url}/avatars/{user.login}",
            "gravatar_id": "",
            "url": f"{double.api_url}/users/{user.login}",
            "html_url": f"{double.url}/{user.login}",
            "type": "User",
            "site_admin": False,
        },
    }


def open_signed_in(client: Any, double: GitHubDouble, login: str, path: str) -> Any:
    """GET `path` on onloop's pages without a session: sent to sign in, through the double's
    authorize page as `login`, and back to `path`; the last answer (the page itself)."""
    first = client.get(path)
    assert first.status_code == 302, first.get_data(as_text=True)
    assert first.headers["Location"] == f"/oauth/login?next={path}"
    start = client.get(first.headers["Location"])
    assert start.status_code == 302, start.get_data(as_text=True)
    double.oauth.user = login
    page = requests.get(start.headers["Location"], allow_redirects=False, timeout=10)
    assert page.status_code == 302, page.text
    back = client.get(page.headers["Location"])
    assert back.status_code == 302, back.get_data(as_text=True)
    assert back.headers["Location"] == path
    return client.get(path)
