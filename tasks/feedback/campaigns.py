"""A campaign's words on GitHub: the section of each PR body, and the tracking issue's table."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from app.core.markdown import plain
from app.store.campaigns import LABELS
from app.store.fleet_tables import RepoState


@dataclass(frozen=True)
class Line:
    """One repository as the texts show it."""

    repo: str
    state: str
    pr_number: int | None = None
    ci_state: str | None = None
    reason: str | None = None


def section_marker(campaign_id: int) -> tuple[str, str]:
    return f"<!-- onloop:campaign-{campaign_id} -->", f"<!-- /onloop:campaign-{campaign_id} -->"


def tracking_marker(campaign_id: int) -> str:
    return f"<!-- onloop:campaign-{campaign_id}-tracking -->"


def pr_link(github_url: str, repo: str, number: int) -> str:
    return f"[{repo}#{number}]({github_url.rstrip('/')}/{repo}/pull/{number})"


def siblings(lines: Sequence[Line], repo: str) -> list[Line]:
    """The other repositories' pull requests (open or merged), in the campaign's order."""
    return [
        line
        for line in lines
        if line.repo != repo
        and line.pr_number is not None
        and line.state in (RepoState.PR_OPEN, RepoState.MERGED)
    ]


def siblings_digest(lines: Sequence[Line], repo: str) -> str:
    text = ",".join(f"{s.repo}#{s.pr_number}" for s in siblings(lines, repo))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def pr_section(
    campaign_id: int,
    name: str,
    github_url: str,
    issue: tuple[str, int] | None,
    lines: Sequence[Line],
    repo: str,
) -> str:
    """The campaign's part of a pull request body: the campaign, its tracking issue and the
    sibling pull requests, between markers so that it is replaced, never appended twice."""
    start, end = section_marker(campaign_id)
    found = siblings(lines, repo)
    tracked = ""
    if issue is not None:
        tracked = f" (tracked in {issue[0]}#{issue[1]})"
    items = [f"- {pr_link(github_url, s.repo, s.pr_number or 0)}" for s in found]
    listed = "\n".join(items) if items else "- none yet"
    return (
        f"{start}\n---\nPart of the onloop campaign **{name}**{tracked}. "
        f"Sibling pull requests:\n\n{listed}\n{end}"
    )


def with_section(body: str, campaign_id: int, section: str) -> str:
    """`body` with the campaign's section replaced (or added at the end)."""
    start, end = section_marker(campaign_id)
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(body):
        return pattern.sub(lambda _: section, body, count=1)
    return f"{body.rstrip()}\n\n{section}"


def _state(line: Line, github_url: str) -> str:
    label = LABELS.get(line.state, line.state)
    if line.pr_number is not None and line.state in (
        RepoState.PR_OPEN,
        RepoState.MERGED,
        RepoState.CLOSED,
    ):
        label += f" {pr_link(github_url, line.repo, line.pr_number)}"
    if line.state == RepoState.PR_OPEN:
        label += f", CI {line.ci_state or 'not reported'}"
    if line.reason and line.state in (RepoState.SKIPPED, RepoState.FAILED):
        label += f": {plain(line.reason[:300]).replace('|', '&#124;')}"
    return label


def start_url(public_url: str, campaign_id: int) -> str:
    """The campaign's page, where its owner starts a campaign awaiting them."""
    return f"{public_url.rstrip('/')}/campaigns/{campaign_id}"


def tracking_body(
    campaign_id: int,
    name: str,
    owner: str,
    state: str,
    github_url: str,
    lines: Sequence[Line],
    waiting_at: str | None = None,
) -> str:
    """The tracking issue: a table of repositories and states, then the totals;
    `waiting_at`: the page where the owner starts the campaign awaiting them."""
    waits = (
        [
            f"It waits for @{owner} to start it at {waiting_at} (its file came from the"
            " configuration repository).",
            "",
        ]
        if waiting_at
        else []
    )
    rows = [f"| {line.repo} | {_state(line, github_url)} |" for line in lines]
    counts = Counter(LABELS.get(line.state, line.state) for line in lines)
    totals = ", ".join(f"{label}: {counts[label]}" for label in LABELS.values() if counts[label])
    return "\n".join(
        [
            tracking_marker(campaign_id),
            f"onloop campaign **{name}**, run by @{owner}; campaign state: {state}.",
            "",
            *waits,
            "| repository | state |",
            "| --- | --- |",
            *rows,
            "",
            f"**{len(lines)} repositories**: {totals or 'none'}.",
            "",
            "onloop edits this issue as the campaign moves on; `onloop campaign status "
            f"{name}` says the same.",
        ]
    )
