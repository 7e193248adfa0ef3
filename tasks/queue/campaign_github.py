"""A campaign's GitHub side: its repositories found, its PRs read, linked and closed, its issue."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from github import Github, GithubException
from github.PullRequest import PullRequest
from github.Repository import Repository

import app.github.clients as gh
from app.core.settings import Settings
from app.github.user_tokens import NotAuthorized, access_token, find_user_id
from app.policy.campaign_file import CampaignFile
from app.store import campaigns as store
from app.store.db import Database
from app.store.fleet_tables import Campaign, CampaignRepo, CampaignState, RepoState
from tasks.feedback.campaigns import (
    Line,
    pr_section,
    siblings_digest,
    start_url,
    tracking_body,
    tracking_marker,
    with_section,
)
from tasks.runner.people import FAR_FUTURE, permitted, role_of

# What the coordinator reads and writes as onloop: PRs and their checks, the tracking issue.
PERMISSIONS = {
    "metadata": "read",
    "contents": "read",
    "pull_requests": "read",
    "checks": "read",
    "issues": "write",
}
CLOSE_COMMENT = (
    "onloop closes this pull request for @{owner}: the campaign **{name}** was closed "
    "(`onloop campaign close {name}`). Its branch is kept."
)


class CampaignRefused(Exception):
    """The campaign cannot start; the message says why and what to do."""


@dataclass
class CampaignGitHub:
    """GitHub for one campaign: the installation (narrowed token) and the owner's own token."""

    settings: Settings
    db: Database
    github: gh.GitHubApp

    def client(self, installation_id: int) -> Github:
        token = self.github.installation_token(installation_id, permissions=PERMISSIONS)
        return self.github.installation_client(token)

    def owner_client(self, campaign: Campaign) -> Github | None:
        """The owner's own client; None when they have no usable authorisation."""
        uid = campaign.owner_id or find_user_id(self.db, campaign.owner)
        if uid is None:
            return None
        try:
            value, expires = access_token(self.db, self.settings, uid)
        except NotAuthorized:
            return None
        token = gh.UserToken(value, expires or FAR_FUTURE, login=campaign.owner)
        return self.github.user_client(token)

    # --- starting ------------------------------------------------------------------------
    def installation_of(self, repo: str) -> int:
        """The installation that holds `repo` (the tracking issue's: the campaign's)."""
        account = repo.split("/")[0].lower()
        with self.github.app_integration() as gi:
            _, data = gi.requester.requestJsonAndCheck("GET", "/app/installations")
        for item in data or []:
            if str(item.get("account", {}).get("login", "")).lower() == account:
                return int(item["id"])
        raise CampaignRefused(f"onloop is not installed for {repo.split('/')[0]}")

    def resolve(self, spec: CampaignFile, installation_id: int) -> list[tuple[str, str | None]]:
        """The installation's repositories the file selects, each with why it is skipped
        (None: the owner may write to it)."""
        client = self.client(installation_id)
        found = [r for r in _installation_repos(client) if _selected(spec.repositories, r)]
        out: list[tuple[str, str | None]] = []
        for item in found:
            name = str(item["full_name"])
            role = role_of(client.get_repo(name), spec.owner)
            skipped = None
            if not permitted(role, "write"):
                skipped = f"@{spec.owner} has {role} access here; a campaign needs write"
            if item.get("archived"):
                skipped = "the repository is archived"
            out.append((name, skipped))
        return out

    # --- following -----------------------------------------------------------------------
    def refresh(self, client: Github, rows: Sequence[CampaignRepo]) -> None:
        """Each open PR's state on GitHub: merged, closed, or open with its CI."""
        for row in rows:
            if row.state != RepoState.PR_OPEN or row.pr_number is None:
                continue
            repo = client.get_repo(row.repo)
            pr = repo.get_pull(row.pr_number)
            if pr.merged:
                store.update_repo(self.db, row.id, state=RepoState.MERGED)
            elif pr.state == "closed":
                store.update_repo(self.db, row.id, state=RepoState.CLOSED)
            else:
                ci = ci_state(repo, pr.head.sha)
                if ci != row.ci_state:
                    store.update_repo(self.db, row.id, ci_state=ci)
                self._remake_if_conflicted(row, pr)

    def _remake_if_conflicted(self, row: CampaignRepo, pr: PullRequest) -> None:
        """A PR whose base moved so that it conflicts is made again on the new base: the
        campaign's change is reproducible, so this is a rebase with no conflict to resolve.
        Only when conflicted (`mergeable_state` "dirty"; GitHub computes it in the
        background and may say "unknown" first, then the next pass sees it:
        https://docs.github.com/en/rest/guides/using-the-rest-api-to-interact-with-your-git-database#checking-mergeability-of-pull-requests),
        once per head and base. Clearing the digest makes the next start a re-run."""
        if pr.mergeable_state != "dirty":
            return
        key = f"{pr.head.sha}:{pr.base.sha}"
        if row.rebase_of != key:
            store.update_repo(self.db, row.id, rebase_of=key, digest=None)

    def link_siblings(
        self, campaign: Campaign, spec: CampaignFile, rows: Sequence[CampaignRepo]
    ) -> None:
        """Each open PR's body lists its siblings as they are now, edited in place."""
        lines = lines_of(rows)
        stale = [
            r
            for r in rows
            if r.state == RepoState.PR_OPEN
            and r.pr_number
            and r.siblings != siblings_digest(lines, r.repo)
        ]
        if not stale:
            return
        user = self.owner_client(campaign)
        if user is None:
            return
        issue = (campaign.issue_repo, campaign.issue_number) if campaign.issue_number else None
        for row in stale:
            assert row.pr_number is not None
            pr = user.get_repo(row.repo).get_pull(row.pr_number)
            section = pr_section(
                campaign.id, spec.name, self.settings.github_url, issue, lines, row.repo
            )
            body = with_section(pr.body or "", campaign.id, section)
            if body != (pr.body or ""):
                pr.edit(body=body)
            store.update_repo(self.db, row.id, siblings=siblings_digest(lines, row.repo))

    def track(self, client: Github, campaign: Campaign, rows: Sequence[CampaignRepo]) -> None:
        """The one tracking issue, created once and then edited in place (never commented)."""
        body = tracking_body(
            campaign.id,
            campaign.name,
            campaign.owner,
            campaign.state,
            self.settings.github_url,
            lines_of(rows),
            start_url(self.settings.public_url, campaign.id)
            if campaign.state == CampaignState.AWAITING_OWNER
            else None,
        )
        repo = client.get_repo(campaign.issue_repo)
        if campaign.issue_number is None:
            issue = repo.create_issue(title=f"Campaign: {campaign.name}", body=body)
            store.set_issue(self.db, campaign.id, issue.number)
            campaign.issue_number = issue.number
            return
        issue = repo.get_issue(campaign.issue_number)
        if (issue.body or "") != body and tracking_marker(campaign.id) in (issue.body or ""):
            issue.edit(body=body)

    def close_open(self, campaign: Campaign, rows: Sequence[CampaignRepo]) -> list[str]:
        """Close the campaign's unmerged PRs with a comment, in the owner's name."""
        user = self.owner_client(campaign)
        if user is None:
            raise CampaignRefused(f"@{campaign.owner} has no usable onloop authorisation")
        closed = []
        for row in rows:
            if row.state != RepoState.PR_OPEN or row.pr_number is None:
                continue
            pr = user.get_repo(row.repo).get_pull(row.pr_number)
            if pr.state == "open" and not pr.merged:
                pr.create_issue_comment(
                    CLOSE_COMMENT.format(owner=campaign.owner, name=campaign.name)
                )
                pr.edit(state="closed")
                closed.append(row.repo)
            store.update_repo(
                self.db, row.id, state=RepoState.MERGED if pr.merged else RepoState.CLOSED
            )
        return closed


def lines_of(rows: Sequence[CampaignRepo]) -> list[Line]:
    return [Line(r.repo, r.state, r.pr_number, r.ci_state, r.reason) for r in rows]


def ci_state(repo: Repository, sha: str) -> str | None:
    """The check runs on the PR's head, onloop's own left out: passing, failing, pending."""
    try:
        runs = [
            r for r in repo.get_commit(sha).get_check_runs() if not r.name.startswith("onloop/")
        ]
    except GithubException:
        return None
    if not runs:
        return None
    if any(r.status != "completed" for r in runs):
        return "pending"
    bad = ("failure", "timed_out", "cancelled", "action_required")
    return "failing" if any(r.conclusion in bad for r in runs) else "passing"


def _installation_repos(client: Github) -> list[dict[str, Any]]:
    """GET /installation/repositories, every page."""
    out: list[dict[str, Any]] = []
    page = 1
    while True:
        _, data = client.requester.requestJsonAndCheck(
            "GET", "/installation/repositories", parameters={"per_page": 100, "page": page}
        )
        items = list((data or {}).get("repositories") or [])
        out += items
        if len(items) < 100:
            return out
        page += 1


def _selected(selectors: Sequence[str], item: dict[str, Any]) -> bool:
    """Whether a repository (its JSON) matches one of the file's selectors."""
    full = str(item.get("full_name", "")).lower()
    for selector in selectors:
        if selector.startswith("topic:"):
            if selector[6:] in [str(t).lower() for t in item.get("topics") or []]:
                return True
        elif selector.startswith("language:"):
            if selector[9:].lower() == str(item.get("language") or "").lower():
                return True
        elif fnmatch.fnmatchcase(full if "/" in selector else full.split("/")[1], selector.lower()):
            return True
    return False
