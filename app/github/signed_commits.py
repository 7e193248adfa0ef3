"""Commits GitHub makes and signs itself: GraphQL `createCommitOnBranch`, one commit appended
to a branch under an expected head OID (https://docs.github.com/en/graphql/reference/mutations#createcommitonbranch)."""

from __future__ import annotations

from typing import Any

from github import Github

MUTATION = (
    "mutation($input: CreateCommitOnBranchInput!) "
    "{ createCommitOnBranch(input: $input) { commit { oid } } }"
)


class StaleHead(Exception):
    """The branch no longer points at `expectedHeadOid` (GraphQL error type STALE_DATA):
    somebody pushed meanwhile, and GitHub made no commit."""


class CommitRefused(Exception):
    """GitHub answered the mutation with another error; the message is GitHub's."""


def create_commit_on_branch(client: Github, given: dict[str, Any]) -> str:
    """Append one commit to a branch as the client's user, from `given` (the mutation's
    CreateCommitOnBranchInput); the new commit's OID. GraphQL answers errors with 200 and an
    `errors` list (https://docs.github.com/en/graphql/guides/forming-calls-with-graphql)."""
    requester = client.requester
    _, data = requester.requestJsonAndCheck(
        "POST",
        requester.graphql_url,
        input={"query": MUTATION, "variables": {"input": given}},
    )
    body = data if isinstance(data, dict) else {}
    errors = body.get("errors") or []
    if any(isinstance(e, dict) and e.get("type") == "STALE_DATA" for e in errors):
        raise StaleHead(str(errors[0].get("message", "")))
    made = (body.get("data") or {}).get("createCommitOnBranch") or {}
    oid = (made.get("commit") or {}).get("oid")
    if errors or not isinstance(oid, str):
        said = "; ".join(str(e.get("message", e)) for e in errors if isinstance(e, dict))
        raise CommitRefused(said or "GitHub made no commit")
    return oid
