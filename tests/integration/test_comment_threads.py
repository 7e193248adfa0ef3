"""Bot comments on a thread made without reading the issue first (`thread`), against the
GitHub double with real PyGithub: the same comment found again and edited in place."""

from __future__ import annotations

from github import Auth, Github

from app.github.comments import marker, thread, upsert_comment
from tests.doubles.github import GitHubDouble

REPO = "octo/threads"


def test_a_comment_is_made_and_edited_with_no_read_of_the_issue(
    github_double: GitHubDouble,
) -> None:
    double = github_double
    double.create_repo(REPO, files={"README.md": "hi\n"})
    issue = double.create_issue(REPO, "A thread", "Its body.", user="alice")
    inst = next(i for i in double.installations.values() if i.account == "octo")
    token = double.issue_installation_token(inst.id).value
    gh = Github(auth=Auth.Token(token), base_url=double.api_url, retry=0)
    repo = gh.get_repo(REPO)
    start = len(double.calls())

    made = upsert_comment(thread(repo, issue.number), "job-7", "working", None)
    again = upsert_comment(thread(repo, issue.number), "job-7", "done", None)

    assert again.id == made.id
    said = [c for c in double.calls()[start:] if c.surface == "api"]
    issue_path = f"/repos/{REPO}/issues/{issue.number}"
    assert not [c for c in said if c.method == "GET" and c.path == issue_path], said
    assert [c.method for c in said if c.path == issue_path + "/comments"] == ["GET", "POST", "GET"]
    (body,) = [c.body for c in gh.get_repo(REPO).get_issue(issue.number).get_comments()]
    assert body == f"{marker('job-7')}\ndone"
