"""app/github/clients.py against the GitHub double: JWTs, tokens, clients, hook deliveries."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from github import BadCredentialsException, GithubException, UnknownObjectException
from github.ContentFile import ContentFile

from app.github import clients as gh
from tests.doubles.github import GitHubDouble
from tests.doubles.github.settings import settings_for


@pytest.fixture
def double(github_double: GitHubDouble) -> GitHubDouble:
    github_double.create_repo("octo/hello", files={"README.md": "hi\n"})
    github_double.create_repo("octo/other", files={"README.md": "other\n"})
    return github_double


@pytest.fixture
def github(double: GitHubDouble, tmp_path: Path) -> gh.GitHubApp:
    return gh.GitHubApp.for_settings(settings_for(double, tmp_path))


def _installation_id(double: GitHubDouble) -> int:
    return next(i.id for i in double.installations.values() if i.account == "octo")


def test_app_jwt_has_the_claims_github_requires(double: GitHubDouble, github: gh.GitHubApp) -> None:
    token = github.app_auth().create_jwt()
    claims = jwt.decode(token, double.app.public_key_pem, algorithms=["RS256"])
    now = time.time()
    assert jwt.get_unverified_header(token)["alg"] == "RS256"
    assert claims["iss"] == str(double.app.id)
    assert claims["iat"] <= now - 59
    assert 0 < claims["exp"] - now <= 600


def test_app_client_is_accepted_and_seen_as_the_app(
    double: GitHubDouble, github: gh.GitHubApp
) -> None:
    with github.app_integration() as gi:
        assert gi.get_app().slug == "onloop"
        assert [i.id for i in gi.get_installations()] == [_installation_id(double)]
    calls = double.calls("GET", "/app")
    assert calls and all(c.identity.kind == "app" and c.status == 200 for c in calls)


def test_app_jwt_with_the_wrong_key_is_refused(double: GitHubDouble, tmp_path: Path) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = tmp_path / "other.pem"
    pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(GithubException) as err:
        other = gh.GitHubApp.for_settings(settings_for(double, tmp_path, private_key_path=pem))
        other.installation_token(_installation_id(double))
    assert err.value.status == 401
    assert double.calls("POST", "/app/installations/")[-1].identity.kind == "none"
    assert not double.tokens


def test_installation_token_is_typed_expiring_and_secret(
    double: GitHubDouble, github: gh.GitHubApp
) -> None:
    token = github.installation_token(_installation_id(double))
    assert isinstance(token, gh.InstallationToken)
    assert token.secret().startswith("ghs_")
    assert token.secret() not in repr(token) and token.secret() not in str(token)
    assert timedelta(minutes=59) < token.expires_at - datetime.now(UTC) <= timedelta(hours=1)
    assert not token.expires_within(timedelta(minutes=5))
    assert token.permissions["contents"] == "write"
    repo = github.installation_client(token).get_repo("octo/hello")
    comment = repo.get_issue(double.create_issue("octo/hello", "Bug").number).create_comment("ok")
    assert comment.user.login == "onloop[bot]"
    assert double.calls("POST", "/app/installations/")[-1].identity.kind == "app"
    assert double.calls("GET", "/repos/octo/hello")[-1].identity.kind == "installation"


def test_installation_token_can_be_narrowed(double: GitHubDouble, github: gh.GitHubApp) -> None:
    token = github.installation_token(
        _installation_id(double),
        repositories=["octo/hello"],
        permissions={"contents": "read", "issues": "read"},
    )
    assert token.repositories == ("hello",)
    assert dict(token.permissions) == {"contents": "read", "issues": "read"}
    assert double.calls("POST", "/app/installations/")[-1].json == {
        "repositories": ["hello"],
        "permissions": {"contents": "read", "issues": "read"},
    }
    client = github.installation_client(token)
    repo = client.get_repo("octo/hello")
    readme = repo.get_contents("README.md")
    assert isinstance(readme, ContentFile) and readme.decoded_content == b"hi\n"
    with pytest.raises(UnknownObjectException):
        client.get_repo("octo/other")
    issue = repo.get_issue(double.create_issue("octo/hello", "Bug").number)
    with pytest.raises(GithubException) as err:
        issue.create_comment("not allowed: issues is read-only")
    assert err.value.status == 403


def test_narrowing_beyond_the_installation_is_refused(
    double: GitHubDouble, github: gh.GitHubApp
) -> None:
    with pytest.raises(GithubException) as err:
        github.installation_token(_installation_id(double), permissions={"admin": "write"})
    assert err.value.status == 422
    with pytest.raises(GithubException):
        github.installation_token(_installation_id(double), repositories=["elsewhere"])


def test_expired_installation_token_is_refused(double: GitHubDouble, github: gh.GitHubApp) -> None:
    double.installation_token_ttl = 120
    token = github.installation_token(_installation_id(double))
    assert token.expires_within(timedelta(minutes=5))
    client = github.installation_client(token)
    assert client.get_repo("octo/hello").name == "hello"
    double.advance(121)
    with pytest.raises(BadCredentialsException):
        client.get_repo("octo/hello")


def test_user_client_acts_as_the_user(double: GitHubDouble, github: gh.GitHubApp) -> None:
    token = gh.UserToken(double.issue_user_token("alice"), datetime.now(UTC) + timedelta(hours=8))
    assert token.secret() not in repr(token)
    client = github.user_client(token)
    assert client.get_user().login == "alice"
    issue = client.get_repo("octo/hello").get_issue(double.create_issue("octo/hello", "x").number)
    assert issue.create_comment("from alice").user.login == "alice"
    assert double.comments("octo/hello", issue.number)[0].user == "alice"


def test_clients_refuse_the_other_kind_of_token(github: gh.GitHubApp) -> None:
    expires = datetime.now(UTC) + timedelta(hours=1)
    with pytest.raises(TypeError):
        github.installation_client(gh.UserToken("ghu_x", expires))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        github.user_client(
            gh.InstallationToken("ghs_x", expires, installation_id=1),  # type: ignore[arg-type]
        )
    assert gh.UserToken("t", expires) != gh.InstallationToken("t", expires, installation_id=1)


def test_tokens_never_appear_in_urls(double: GitHubDouble, github: gh.GitHubApp) -> None:
    token = github.installation_token(_installation_id(double))
    github.installation_client(token).get_repo("octo/hello").get_contents("README.md")
    for call in double.calls():
        assert token.secret() not in call.path + repr(call.query)
        assert "authorization" not in call.headers


def test_retries_secondary_rate_limit_and_server_errors(
    double: GitHubDouble, github: gh.GitHubApp
) -> None:
    token = github.installation_token(_installation_id(double))
    client = github.installation_client(token)
    double.secondary_rate_limit(1, retry_after=1, path_prefix="/repos/octo/hello")
    double.fail_next(2, 502, path_prefix="/repos/octo/other")
    assert client.get_repo("octo/hello").name == "hello"
    assert client.get_repo("octo/other").name == "other"
    assert [c.status for c in double.calls("GET", "/repos/octo/hello")] == [403, 200]
    assert [c.status for c in double.calls("GET", "/repos/octo/other")] == [502, 502, 200]


def test_hook_deliveries_are_paged_until_since(double: GitHubDouble, github: gh.GitHubApp) -> None:
    start = int(time.time()) - 10_000
    for n in range(250):  # one a minute, oldest first
        double.add_delivery("issues", "labeled", delivered_at=start + 60 * n, status_code=200)
    since = datetime.fromtimestamp(start + 60 * 20, UTC)
    found = github.list_hook_deliveries(since)
    assert len(found) == 230
    assert all(d["delivered_at"] >= since for d in found)
    assert found[0]["delivered_at"] > found[-1]["delivered_at"]
    assert {"id", "guid", "status_code", "event", "action", "redelivery"} <= set(found[0])
    pages = double.calls("GET", "/app/hook/deliveries")
    assert [c.query.get("cursor") is not None for c in pages] == [False, True, True]
    assert all(c.query["per_page"] == ["100"] for c in pages)

    recent = github.list_hook_deliveries(datetime.fromtimestamp(start + 60 * 200, UTC))
    assert len(recent) == 50
    assert len(double.calls("GET", "/app/hook/deliveries")) == 4  # one page was enough


def test_redeliver_asks_github_again(double: GitHubDouble, github: gh.GitHubApp) -> None:
    failed = double.add_delivery("issue_comment", "created", status_code=502)
    github.redeliver(failed.id)
    assert double.redeliveries == [failed.id]
    latest = github.list_hook_deliveries(datetime.now(UTC) - timedelta(minutes=1))[0]
    assert latest["guid"] == failed.guid and latest["redelivery"] is True
    with pytest.raises(UnknownObjectException):
        github.redeliver(999_999)
