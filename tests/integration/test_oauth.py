"""The OAuth web flow against the GitHub double: state, encrypted storage, refresh, revocation."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import requests
from sqlalchemy import select, text, update

from app.core.crypto import StateSigner, TokenBox
from app.core.settings import Settings
from app.github.user_tokens import (
    NotAuthorized,
    OAuthError,
    access_token,
    exchange_code,
    refresh_pair,
)
from app.store.db import Database
from app.store.models import Job, JobState, Outbox, UserAccount, utcnow
from app.web import create_app
from tasks.runner.people import resume_if_authorized
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import SECRET_KEY, settings_for
from tests.doubles.oauth_flow import authorization_revoked, follow, query, sign_in
from tests.doubles.webhooks import deliver

CALLBACK = "http://localhost:8000/oauth/callback"


class Web:
    def __init__(self, double: GitHubDouble, settings: Settings, db: Database) -> None:
        self.double, self.settings, self.db = double, settings, db
        self.client = create_app(settings, db=db).test_client()

    def accounts(self) -> list[UserAccount]:
        with self.db.read() as s:
            return list(s.scalars(select(UserAccount)))

    def stored(self, login: str) -> tuple[str, str]:
        """The (access, refresh) tokens stored for `login`, decrypted."""
        (row,) = [a for a in self.accounts() if a.login == login]
        box = TokenBox(SECRET_KEY)
        assert row.access_token and row.refresh_token
        access, refresh = box.open(row.access_token), box.open(row.refresh_token)
        assert access and refresh
        return access, refresh

    def time_passes(self, login: str) -> None:
        """Eight hours later: the access token has expired, here and at GitHub."""
        with self.db.transaction() as s:
            s.execute(
                update(UserAccount)
                .where(UserAccount.login == login)
                .values(access_expires_at=utcnow() - timedelta(minutes=1))
            )
        assert self.double.oauth.expire_user_tokens(login)


@pytest.fixture
def web(github_double: GitHubDouble, database_url: str, tmp_path: Path) -> Iterator[Web]:
    db = Database(database_url)
    yield Web(github_double, settings_for(github_double, tmp_path, database_url=database_url), db)
    db.dispose()


def whoami(double: GitHubDouble, token: str) -> int:
    """GET /user with `token`: 200 when GitHub takes it, 401 when not."""
    headers = {"Authorization": f"Bearer {token}"}
    return requests.get(double.api_url + "/user", headers=headers, timeout=10).status_code


def test_login_redirects_to_github_with_a_signed_expiring_state(web: Web) -> None:
    response = web.client.get("/oauth/login")
    assert response.status_code == 302
    location = response.headers["Location"]
    assert location.startswith(web.double.url + "/login/oauth/authorize?")
    params = query(location)
    assert set(params) == {"client_id", "redirect_uri", "state"}
    assert params["client_id"] == web.double.app.client_id
    assert params["redirect_uri"] == CALLBACK
    signed = StateSigner(SECRET_KEY).verify(params["state"])
    assert signed is not None
    cookie = web.client.get_cookie("onloop_oauth", path="/oauth")
    assert cookie is not None and cookie.http_only and cookie.value == signed["n"]
    assert StateSigner("another-key-0123456789abcdef0123456789").verify(params["state"]) is None


def test_login_without_an_oauth_client_is_503(web: Web, tmp_path: Path) -> None:
    settings = settings_for(web.double, tmp_path, database_url=web.db.url, client_id=None)
    client = create_app(settings, db=web.db).test_client()
    assert client.get("/oauth/login").status_code == 503
    assert client.get("/oauth/callback?code=x&state=y").status_code == 503


def _old_state(nonce: str) -> str:
    with mock.patch("time.time", return_value=time.time() - 601):
        return StateSigner(SECRET_KEY).sign({"n": nonce})


@pytest.mark.parametrize("kind", ["garbage", "expired", "foreign key", "other browser"])
def test_callback_with_a_bad_state_is_400_and_stores_nothing(web: Web, kind: str) -> None:
    start = query(web.client.get("/oauth/login").headers["Location"])
    nonce = StateSigner(SECRET_KEY).verify(start["state"])["n"]  # type: ignore[index]
    code = web.double.oauth.new_code("carol", CALLBACK)
    client = web.client
    state = {
        "garbage": "not-a-state",
        "expired": _old_state(nonce),
        "foreign key": StateSigner("another-key-0123456789abcdef0123456789").sign({"n": nonce}),
        "other browser": start["state"],
    }[kind]
    if kind == "other browser":  # the signed state is fine, but this browser did not start
        client = create_app(web.settings, db=web.db).test_client()
    response = client.get("/oauth/callback", query_string={"code": code, "state": state})
    assert response.status_code == 400
    assert "Nothing was stored" in response.get_data(as_text=True)
    assert web.accounts() == [] and web.double.oauth.requests == []


def test_the_flow_stores_the_tokens_encrypted(web: Web) -> None:
    before = utcnow()
    page = sign_in(web.client, web.double, "carol")
    after = utcnow()
    assert "@carol" in page.get_data(as_text=True)
    assert web.client.get_cookie("onloop_oauth", path="/oauth") is None
    (row,) = web.accounts()
    assert (row.id, row.login) == (web.double.user("carol").id, "carol")
    access, refresh = web.stored("carol")
    assert access.startswith("ghu_") and refresh.startswith("ghr_")
    assert whoami(web.double, access) == 200
    with web.db.engine.connect() as conn:
        raw = conn.execute(text("SELECT access_token, refresh_token FROM user_accounts")).one()
    for column, token in zip(raw, (access, refresh), strict=True):
        assert token not in column and column != token
    assert row.access_expires_at is not None and row.refresh_expires_at is not None
    expires = row.access_expires_at.replace(tzinfo=before.tzinfo)
    assert before + timedelta(hours=8) <= expires <= after + timedelta(hours=8)
    refresh_expires = row.refresh_expires_at.replace(tzinfo=before.tzinfo)
    assert refresh_expires >= before + timedelta(seconds=15811200)
    assert [(r.grant_type, r.login) for r in web.double.oauth.requests] == [
        ("authorization_code", "carol")
    ]


def test_a_code_works_once(web: Web) -> None:
    page, callback = follow(web.client, web.double, "carol")
    assert page.status_code == 200
    first = web.stored("carol")
    with pytest.raises(OAuthError) as refused:
        exchange_code(web.settings, query(callback)["code"], CALLBACK)
    assert refused.value.code == "bad_verification_code"
    web.client.get("/oauth/login")  # a new flow in the same browser, then the old callback
    replay = web.client.get(callback)
    assert replay.status_code == 400 and web.stored("carol") == first


def test_github_refusing_the_exchange_is_400_and_stores_nothing(web: Web, tmp_path: Path) -> None:
    settings = settings_for(
        web.double, tmp_path, database_url=web.db.url, client_secret="not-the-secret"
    )
    page, _ = follow(create_app(settings, db=web.db).test_client(), web.double, "carol")
    assert page.status_code == 400
    assert "incorrect_client_credentials" in page.get_data(as_text=True)
    assert web.accounts() == []


def test_an_unregistered_callback_comes_back_as_an_error(web: Web) -> None:
    web.double.oauth.register_callback("https://onloop.example/oauth/callback")
    page, callback = follow(web.client, web.double, "carol")
    assert callback.startswith("https://onloop.example/oauth/callback?")
    assert query(callback)["error"] == "redirect_uri_mismatch"
    assert page.status_code == 400 and web.accounts() == []


def test_refresh_rotates_the_pair_once_for_two_workers(web: Web) -> None:
    sign_in(web.client, web.double, "alice")
    old_access, old_refresh = web.stored("alice")
    uid = web.double.user("alice").id
    web.time_passes("alice")
    # The first refresh is held at the double, so the second worker reads the stale row too.
    web.double.delay_next(1, 1.0, method="POST", path_prefix="/login/oauth/access_token")
    start = threading.Barrier(2)
    got: list[Any] = []

    def worker() -> None:
        start.wait()
        try:
            got.append(access_token(web.db, web.settings, uid)[0])
        except Exception as exc:  # reported below
            got.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    new_access, new_refresh = web.stored("alice")
    assert got == [new_access, new_access]
    assert len(web.double.oauth.refreshes) == 1
    assert new_access != old_access and new_refresh != old_refresh
    assert whoami(web.double, new_access) == 200 and whoami(web.double, old_access) == 401
    with pytest.raises(OAuthError) as refused:
        refresh_pair(web.settings, old_refresh)
    assert refused.value.code == "bad_refresh_token"


def test_a_token_github_refused_is_refreshed_unless_already_replaced(web: Web) -> None:
    sign_in(web.client, web.double, "alice")
    uid = web.double.user("alice").id
    old, _ = web.stored("alice")
    web.double.oauth.expire_user_tokens("alice")  # early, while onloop thinks it is good
    assert access_token(web.db, web.settings, uid)[0] == old
    new = access_token(web.db, web.settings, uid, rejected=old)[0]
    assert new != old and whoami(web.double, new) == 200
    again = access_token(web.db, web.settings, uid, rejected=old)[0]  # a second worker
    assert again == new and len(web.double.oauth.refreshes) == 1


def test_a_refused_refresh_forgets_the_tokens(web: Web) -> None:
    sign_in(web.client, web.double, "alice")
    web.double.oauth.revoke("alice")  # and the webhook got lost
    with web.db.transaction() as s:  # hours later, the access token is due for a refresh
        s.execute(update(UserAccount).values(access_expires_at=utcnow()))
    with pytest.raises(NotAuthorized, match="bad_refresh_token"):
        access_token(web.db, web.settings, web.double.user("alice").id)
    assert web.accounts() == []


def test_the_revoked_webhook_deletes_the_tokens(web: Web) -> None:
    sign_in(web.client, web.double, "alice")
    sign_in(web.client, web.double, "bob")
    response = deliver(
        web.client, "github_app_authorization", authorization_revoked(web.double, "alice")
    )
    assert response.status_code == 202, response.get_data(as_text=True)
    assert [a.login for a in web.accounts()] == ["bob"]


def _waiting(db: Database, login: str, user_id: int | None) -> int:
    with db.transaction() as s:
        job = Job(
            kind="rebase_pr",
            repo="octo/widgets",
            number=1,
            requested_by=login,
            requested_by_id=user_id,
            state=JobState.WAITING_FOR_AUTHORIZATION,
            started_at=utcnow(),
        )
        s.add(job)
        s.flush()
        return job.id


def test_the_callback_resumes_only_that_persons_waiting_jobs(web: Web) -> None:
    carol = web.double.user("carol").id
    mine = _waiting(web.db, "carol", carol)
    by_login = _waiting(web.db, "carol", None)
    renamed = _waiting(web.db, "carol", carol + 1)  # someone else, who was called carol once
    other = _waiting(web.db, "dave", web.double.user("dave").id)
    page = sign_in(web.client, web.double, "carol")
    assert "2 waiting job(s) resumed" in page.get_data(as_text=True)
    with web.db.read() as s:
        states = {j.id: j.state for j in s.scalars(select(Job))}
        outbox = sorted(s.scalars(select(Outbox.job_id)))
    assert states[mine] == states[by_login] == JobState.QUEUED
    assert states[renamed] == states[other] == JobState.WAITING_FOR_AUTHORIZATION
    assert outbox == sorted([mine, by_login])


def test_a_job_that_began_waiting_after_the_flow_is_resumed(web: Web) -> None:
    carol = web.double.user("carol").id
    raced = _waiting(web.db, "carol", carol)  # started before she finished the flow...
    with web.db.transaction() as s:
        s.execute(
            update(Job)
            .where(Job.id == raced)
            .values(state=JobState.RUNNING, started_at=utcnow() - timedelta(seconds=5))
        )
    sign_in(web.client, web.double, "carol")  # ...which therefore did not resume it
    with web.db.transaction() as s:
        s.execute(
            update(Job).where(Job.id == raced).values(state=JobState.WAITING_FOR_AUTHORIZATION)
        )
    later = _waiting(web.db, "carol", carol)  # started after it: her token did not work
    assert resume_if_authorized(web.db, raced) is True
    assert resume_if_authorized(web.db, later) is False
    assert resume_if_authorized(web.db, raced) is False  # queued now, not waiting


def test_the_double_answers_form_encoded_unless_asked_for_json(web: Web) -> None:
    code = web.double.oauth.new_code("carol", CALLBACK)
    fields = {
        "client_id": web.double.app.client_id,
        "client_secret": web.double.app.client_secret,
        "code": code,
    }
    url = web.double.url + "/login/oauth/access_token"
    answer = requests.post(url, data=fields, timeout=10)
    assert answer.headers["Content-Type"] == "application/x-www-form-urlencoded"
    body = query("?" + answer.text)
    assert body["token_type"] == "bearer" and body["expires_in"] == "28800"
    assert body["refresh_token_expires_in"] == "15811200" and body["scope"] == ""
    again = requests.post(url, data=fields, headers={"Accept": "application/json"}, timeout=10)
    assert again.status_code == 200 and again.json()["error"] == "bad_verification_code"


def test_a_login_that_changed_hands_answers_for_its_new_owner(web: Web) -> None:
    sign_in(web.client, web.double, "carol")
    old_id = web.double.user("carol").id
    web.double.users.pop("carol")  # carol renamed herself; someone new took the name
    sign_in(web.client, web.double, "carol")
    (row,) = web.accounts()
    assert row.login == "carol" and row.id == web.double.user("carol").id != old_id
