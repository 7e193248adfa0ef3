"""The GitHub double itself, driven by real PyGithub, requests and git over loopback."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests
from github import Auth, Github, GithubException, UnknownObjectException
from github.ContentFile import ContentFile
from github.Repository import Repository

from tests.doubles.github import GitHubDouble
from tests.doubles.github.model import RefUpdate

REPO = "octo/hello"


@pytest.fixture
def double(github_double: GitHubDouble) -> GitHubDouble:
    github_double.create_repo(REPO, files={"README.md": "hi\n", "src/app.py": "x = 1\n"})
    return github_double


def as_user(double: GitHubDouble, login: str, role: str | None = None) -> Github:
    if role:
        double.set_permission(REPO, login, role)
    token = double.issue_user_token(login)
    return Github(
        auth=Auth.Token(token),
        base_url=double.api_url,
        seconds_between_writes=0,
        seconds_between_requests=0,
        retry=0,
    )


def as_installation(double: GitHubDouble, **narrow: object) -> tuple[Github, str]:
    inst = next(i for i in double.installations.values() if i.account == "octo")
    token = double.issue_installation_token(inst.id, **narrow).value  # type: ignore[arg-type]
    return Github(
        auth=Auth.Token(token),
        base_url=double.api_url,
        seconds_between_writes=0,
        seconds_between_requests=0,
        retry=0,
    ), token


def read(repo: Repository, path: str, **ref: str) -> bytes:
    found = repo.get_contents(path, **ref)
    assert isinstance(found, ContentFile)
    return found.decoded_content


def git(
    *args: str, cwd: Path | None = None, env: dict[str, str], check: bool = True
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"git {args} failed: {proc.stderr}")
    return proc


def api(
    double: GitHubDouble, method: str, path: str, token: str | None = None, **kwargs: object
) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.request(method, double.api_url + path, headers=headers, timeout=10, **kwargs)  # type: ignore[arg-type]


# --- app JWTs ---------------------------------------------------------------------------------
def test_app_jwt_accepted_and_bad_ones_refused(double: GitHubDouble, tmp_path: Path) -> None:
    assert api(double, "GET", "/app", double.app_jwt()).json()["slug"] == "onloop"
    other = GitHubDouble(tmp_path / "other")
    try:
        wrong_key = double.app_jwt(key_path=other.private_key_path)
    finally:
        other.close()
    now = time.time()
    bad = {
        "wrong key": wrong_key,
        "expired": double.app_jwt(iat=now - 1200, exp=now - 600),
        "too long": double.app_jwt(exp=now + 3600),
        "issued in the future": double.app_jwt(iat=now + 300, exp=now + 500),
        "other app": double.app_jwt(iss="999"),
    }
    for why, token in bad.items():
        response = api(double, "GET", "/app", token)
        assert response.status_code == 401, why
        assert set(response.json()) >= {"message", "documentation_url"}, why
    assert api(double, "GET", "/app").status_code == 401


def test_unknown_and_expired_tokens_get_401(double: GitHubDouble) -> None:
    assert api(double, "GET", f"/repos/{REPO}", "ghs_notatoken").status_code == 401
    token = double.issue_user_token("alice", expires_in=60)
    assert api(double, "GET", f"/repos/{REPO}", token).status_code == 200
    double.advance(61)
    response = api(double, "GET", f"/repos/{REPO}", token)
    assert response.status_code == 401 and response.json()["message"] == "Bad credentials"


def test_access_token_response_shape_and_narrowing(double: GitHubDouble) -> None:
    double.create_repo("octo/other")
    inst = next(i for i in double.installations.values() if i.account == "octo")
    path = f"/app/installations/{inst.id}/access_tokens"
    body = api(
        double,
        "POST",
        path,
        double.app_jwt(),
        json={"repositories": ["hello"], "permissions": {"issues": "read"}},
    ).json()
    assert body["token"].startswith("ghs_") and body["expires_at"].endswith("Z")
    assert body["permissions"] == {"issues": "read"}
    assert body["repository_selection"] == "selected"
    assert [r["full_name"] for r in body["repositories"]] == [REPO]
    token = body["token"]
    assert api(double, "GET", f"/repos/{REPO}", token).status_code == 200
    assert api(double, "GET", "/repos/octo/other", token).status_code == 404
    listed = api(double, "GET", "/installation/repositories", token).json()
    assert [r["full_name"] for r in listed["repositories"]] == [REPO]
    assert api(double, "GET", f"/repos/{REPO}/contents/README.md", token).status_code == 403
    assert api(double, "POST", path, "ghs_x").status_code == 401  # tokens can't mint tokens


def test_installation_cannot_reach_other_accounts(double: GitHubDouble) -> None:
    double.create_repo("someone/else", installed=False)
    client, _ = as_installation(double)
    with pytest.raises(UnknownObjectException):
        client.get_repo("someone/else")
    assert client.get_repo(REPO).full_name == REPO


# --- REST -------------------------------------------------------------------------------------
def test_repo_and_contents(double: GitHubDouble) -> None:
    repo = as_user(double, "alice", "maintain").get_repo(REPO)
    assert repo.default_branch == "main" and not repo.private
    assert repo.clone_url == f"{double.url}/{REPO}.git"
    assert repo.permissions.push and repo.permissions.maintain and not repo.permissions.admin
    assert read(repo, "src/app.py") == b"x = 1\n"
    listing = repo.get_contents("")
    assert isinstance(listing, list) and sorted(c.path for c in listing) == ["README.md", "src"]
    sha = double.commit(REPO, "feature", {"README.md": "changed\n"})
    assert read(repo, "README.md", ref="feature") == b"changed\n"
    assert read(repo, "README.md", ref=sha) == b"changed\n"
    assert read(repo, "README.md") == b"hi\n"
    with pytest.raises(UnknownObjectException):
        repo.get_contents("missing.txt")
    assert repo.get_branch("feature").commit.sha == sha


def test_private_repos_are_hidden_from_strangers(double: GitHubDouble) -> None:
    double.create_repo("octo/secret", private=True)
    with pytest.raises(UnknownObjectException):
        as_user(double, "mallory").get_repo("octo/secret")
    assert api(double, "GET", "/repos/octo/secret").status_code == 404


def test_collaborator_permission(double: GitHubDouble) -> None:
    double.set_permission(REPO, "bob", "maintain")
    double.set_permission(REPO, "carol", "triage")
    repo = as_user(double, "alice", "read").get_repo(REPO)
    assert repo.get_collaborator_permission("bob") == "write"
    assert repo.get_collaborator_role_name("bob") == "maintain"
    assert repo.get_collaborator_permission("carol") == "read"
    assert repo.get_collaborator_role_name("carol") == "triage"
    assert repo.get_collaborator_permission("octo") == "admin"


def test_comments_reactions_and_labels(double: GitHubDouble) -> None:
    number = double.create_issue(REPO, "Bug", "It breaks", user="alice").number
    reader = as_user(double, "alice", "read").get_repo(REPO).get_issue(number)
    comment = reader.create_comment("/agent help")
    assert comment.user.login == "alice" and comment.body == "/agent help"
    comment.edit("/agent fix")
    assert double.comments(REPO, number)[0].body == "/agent fix"
    assert comment.create_reaction("eyes").content == "eyes"
    assert [r.content for r in comment.get_reactions()] == ["eyes"]
    with pytest.raises(GithubException) as err:
        reader.add_to_labels("agent:fix")  # labels need triage
    assert err.value.status == 403

    bot, _ = as_installation(double)
    issue = bot.get_repo(REPO).get_issue(number)
    issue.add_to_labels("agent:fix")
    assert double.issue(REPO, number).labels == ["agent:fix"]
    mine = issue.create_comment("On it.")
    assert mine.user.login == "onloop[bot]" and mine.user.type == "Bot"
    assert [c.body for c in issue.get_comments()] == ["/agent fix", "On it."]
    stranger = as_user(double, "mallory").get_repo(REPO)
    with pytest.raises(GithubException) as err:
        stranger.get_issue(number).get_comment(mine.id).edit("hijacked")
    assert err.value.status == 403
    assert double.comments(REPO, number)[1].body == "On it."
    posted = double.calls("POST", f"/repos/{REPO}/issues/{number}/comments")
    assert [(c.identity.kind, c.identity.login, c.json) for c in posted] == [
        ("user", "alice", {"body": "/agent help"}),
        ("installation", "onloop[bot]", {"body": "On it."}),
    ]


def test_pull_requests(double: GitHubDouble) -> None:
    head = double.commit(REPO, "onloop/issue-1", {"fix.txt": "fixed\n"}, "Fix it")
    repo = as_user(double, "alice", "write").get_repo(REPO)
    pr = repo.create_pull(title="Fix", body="Fixes #1", head="onloop/issue-1", base="main")
    assert (pr.number, pr.user.login, pr.head.sha, pr.head.ref) == (
        1,
        "alice",
        head,
        "onloop/issue-1",
    )
    assert pr.base.sha == double.branch_sha(REPO, "main") and pr.state == "open"
    with pytest.raises(GithubException) as err:
        repo.create_pull(title="Again", body="", head="onloop/issue-1", base="main")
    assert err.value.status == 422
    assert [p.number for p in repo.get_pulls(head="octo:onloop/issue-1")] == [1]
    assert list(repo.get_pulls(head="octo:other")) == []
    assert list(repo.get_pulls(state="closed")) == []
    assert [p.number for p in repo.get_commit(head).get_pulls()] == [1]
    newer = double.commit(REPO, "onloop/issue-1", {"fix.txt": "better\n"})
    assert repo.get_pull(1).head.sha == newer
    issue = repo.get_issue(1)
    assert issue.pull_request is not None and issue.body == "Fixes #1"


def test_fork_pull_request(double: GitHubDouble) -> None:
    double.create_repo("alice/hello", fork_of=REPO)
    sha = double.commit("alice/hello", "patch", {"a.txt": "a\n"})
    number = double.create_pull(
        REPO, "alice:patch", user="alice", maintainer_can_modify=True
    ).number
    pr = as_user(double, "alice").get_repo(REPO).get_pull(number)
    assert pr.head.repo.full_name == "alice/hello" and pr.head.sha == sha
    assert pr.maintainer_can_modify and pr.head.label == "alice:patch"


def test_merge_and_approve_are_refused_and_recorded(double: GitHubDouble) -> None:
    double.commit(REPO, "feature", {"f": "1\n"})
    number = double.create_pull(REPO, "feature", user="bob").number
    pr = as_user(double, "alice", "admin").get_repo(REPO).get_pull(number)
    with pytest.raises(GithubException) as err:
        pr.merge()
    assert err.value.status == 403 and "never" in err.value.data["message"]
    with pytest.raises(GithubException) as err:
        pr.create_review(event="APPROVE", body="lgtm")
    assert err.value.status == 403
    assert [(r.kind, r.number, r.identity.login) for r in double.refusals] == [
        ("merge", number, "alice"),
        ("approve", number, "alice"),
    ]
    review = pr.create_review(
        event="COMMENT", body="Two suggestions", comments=[{"path": "f", "line": 1, "body": "nit"}]
    )
    assert review.state == "COMMENTED" and len(double.approvals) == 1
    assert double.reviews[review.id].comments[0]["body"] == "nit"


def test_rate_limit_headers_and_injected_faults(double: GitHubDouble) -> None:
    token = double.issue_user_token("alice")
    first = api(double, "GET", f"/repos/{REPO}", token)
    second = api(double, "GET", f"/repos/{REPO}", token)
    assert first.headers["x-ratelimit-limit"] == "5000"
    assert (
        int(second.headers["x-ratelimit-remaining"])
        == int(first.headers["x-ratelimit-remaining"]) - 1
    )
    assert int(first.headers["x-ratelimit-reset"]) > time.time()
    double.secondary_rate_limit(2, retry_after=7, path_prefix=f"/repos/{REPO}/issues")
    double.fail_next(1, 500, method="GET", path_prefix="/user")
    for _ in range(2):
        limited = api(double, "GET", f"/repos/{REPO}/issues", token)
        assert limited.status_code == 403 and limited.headers["retry-after"] == "7"
        assert "secondary rate limit" in limited.json()["message"]
    assert api(double, "GET", f"/repos/{REPO}/issues", token).status_code == 200
    assert api(double, "GET", "/user", token).status_code == 500
    assert api(double, "GET", "/user", token).json()["login"] == "alice"
    assert [c.fault for c in double.calls(path_prefix=f"/repos/{REPO}/issues")] == [
        True,
        True,
        False,
    ]


def test_delayed_request_is_visible_in_flight_and_cut_short_by_reset(
    double: GitHubDouble,
) -> None:
    token = double.issue_user_token("alice")
    double.delay_next(1, seconds=60, method="GET", path_prefix=f"/repos/{REPO}")
    answers: list[int] = []
    thread = threading.Thread(
        target=lambda: answers.append(api(double, "GET", f"/repos/{REPO}", token).status_code)
    )
    thread.start()
    deadline = time.monotonic() + 10
    while not double.calls("GET", f"/repos/{REPO}") and time.monotonic() < deadline:
        time.sleep(0.01)
    [in_flight] = double.calls("GET", f"/repos/{REPO}")
    assert in_flight.status == 0 and in_flight.identity.login == "alice" and not answers
    double.reset()
    thread.join(timeout=10)
    assert not thread.is_alive() and answers == [404]  # answered from the new, empty world


def test_hook_deliveries_link_pagination(double: GitHubDouble) -> None:
    for n in range(5):
        double.add_delivery("issues", "labeled", delivered_at=1_700_000_000 + n)
    jwt_ = double.app_jwt()
    page = api(double, "GET", "/app/hook/deliveries?per_page=2", jwt_)
    assert [d["delivered_at"] for d in page.json()] == [
        "2023-11-14T22:13:24Z",
        "2023-11-14T22:13:23Z",
    ]
    seen = [d["id"] for d in page.json()]
    while "next" in page.links:
        assert "cursor=" in page.links["next"]["url"]
        page = requests.get(
            page.links["next"]["url"], timeout=10, headers={"Authorization": f"Bearer {jwt_}"}
        )
        seen += [d["id"] for d in page.json()]
    assert seen == [d.id for d in reversed(double.deliveries)]
    attempt = api(double, "POST", f"/app/hook/deliveries/{seen[0]}/attempts", jwt_)
    assert attempt.status_code == 202 and double.redeliveries == [seen[0]]
    token = double.issue_user_token("alice")
    assert api(double, "GET", "/app/hook/deliveries", token).status_code == 401


# --- git over smart HTTP ----------------------------------------------------------------------
def test_clone_and_push_with_an_installation_token(double: GitHubDouble, tmp_path: Path) -> None:
    _, token = as_installation(double)
    env = double.git_env(token)
    work = tmp_path / "work"
    git("clone", "-q", double.clone_url(REPO), str(work), env=env)
    assert (work / "README.md").read_text() == "hi\n"
    (work / "new.txt").write_text("new\n")
    git("add", "new.txt", cwd=work, env=env)
    git("commit", "-qm", "Add new", cwd=work, env=env)
    git("push", "-q", "origin", "HEAD:refs/heads/onloop/issue-7", cwd=work, env=env)
    new = git("rev-parse", "HEAD", cwd=work, env=env).stdout.strip()
    assert double.branch_sha(REPO, "onloop/issue-7") == new
    [push] = double.pushes
    assert push.identity.kind == "installation" and push.identity.login == "onloop[bot]"
    assert push.updates == [RefUpdate("refs/heads/onloop/issue-7", None, new)]
    assert token not in (work / ".git" / "config").read_text()
    assert all(token not in c.path for c in double.calls(surface="git"))
    advertised = [
        (c.status, c.identity.kind)
        for c in double.calls(surface="git")
        if c.query.get("service") == ["git-receive-pack"]
    ]
    assert advertised == [(401, "none"), (200, "installation")]  # git asked its helper


def test_large_push_is_streamed_chunked(double: GitHubDouble, tmp_path: Path) -> None:
    env = double.git_env(double.issue_user_token("octo"))
    work = tmp_path / "work"
    git("clone", "-q", double.clone_url(REPO), str(work), env=env)
    (work / "blob.bin").write_bytes(os.urandom(200_000))
    git("add", "blob.bin", cwd=work, env=env)
    git("commit", "-qm", "big", cwd=work, env=env)
    git("-c", "http.postBuffer=4096", "push", "-q", "origin", "HEAD:main", cwd=work, env=env)
    posts = double.calls("POST", f"/{REPO}.git/git-receive-pack")
    assert any(c.headers.get("transfer-encoding") == "chunked" for c in posts)
    assert (
        double.branch_sha(REPO, "main")
        == git("rev-parse", "HEAD", cwd=work, env=env).stdout.strip()
    )
    assert len(double.pushes) == 1  # git's probe request is not a push


def test_read_only_user_cannot_push(double: GitHubDouble, tmp_path: Path) -> None:
    double.set_permission(REPO, "reader", "read")
    env = double.git_env(double.issue_user_token("reader"))
    work = tmp_path / "work"
    git("clone", "-q", double.clone_url(REPO), str(work), env=env)
    git("commit", "-q", "--allow-empty", "-m", "nope", cwd=work, env=env)
    before = double.branch_sha(REPO, "main")
    failed = git("push", "origin", "HEAD:main", cwd=work, env=env, check=False)
    assert failed.returncode != 0 and "403" in failed.stderr
    assert double.branch_sha(REPO, "main") == before and double.pushes == []
    denied = double.calls(surface="git")[-1]
    assert denied.status == 403 and denied.identity.login == "reader"

    writer = double.git_env(double.issue_user_token("writer"))
    double.set_permission(REPO, "writer", "write")
    git("push", "-q", "origin", "HEAD:main", cwd=work, env=writer)
    assert double.pushes[0].identity.login == "writer"
    assert double.pushes[0].updates[0].old == before


def test_git_without_good_credentials(double: GitHubDouble, tmp_path: Path) -> None:
    double.create_repo("octo/secret", private=True)
    url = double.clone_url("octo/secret")
    refs = requests.get(url + "/info/refs?service=git-upload-pack", timeout=10)
    assert refs.status_code == 401
    assert refs.headers["WWW-Authenticate"] == 'Basic realm="GitHub"'
    bad = git("clone", "-q", url, str(tmp_path / "a"), env=double.git_env("ghu_bogus"), check=False)
    assert bad.returncode != 0
    expired = double.issue_user_token("octo", expires_in=1)
    double.advance(2)
    again = git("clone", "-q", url, str(tmp_path / "b"), env=double.git_env(expired), check=False)
    assert again.returncode != 0 and not (tmp_path / "b" / "README.md").exists()
    pushed = git("ls-remote", double.clone_url(REPO), env=double.git_env(None))
    assert "refs/heads/main" in pushed.stdout  # public repos can be read anonymously


def test_gzip_fetch_negotiation(double: GitHubDouble, tmp_path: Path) -> None:
    for n in range(40):  # many wants make git gzip its upload-pack request
        double.create_branch(REPO, f"topic-{n:02d}")
    env = double.git_env(double.issue_user_token("octo"))
    git("clone", "-q", "--mirror", double.clone_url(REPO), str(tmp_path / "m"), env=env)
    posts = double.calls("POST", f"/{REPO}.git/git-upload-pack")
    assert any(c.headers.get("content-encoding") == "gzip" and c.status == 200 for c in posts)
    listed = git("for-each-ref", "--format=%(refname)", cwd=tmp_path / "m", env=env).stdout
    assert listed.count("refs/heads/topic-") == 40
