"""Job kinds: the closed set, and the one table that says what each kind is and may do."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType


class Kind(StrEnum):
    """The built-in job kinds. The first four, CONTINUE, ADDRESS_REVIEW and APPLY_SUGGESTIONS
    work in a sandbox; help, cancel and status answer; allow opens a pull request."""

    FIX_ISSUE = "fix_issue"
    REBASE_PR = "rebase_pr"
    FIX_CI = "fix_ci"
    REVIEW_PR = "review_pr"
    HELP = "help"
    CANCEL = "cancel"
    STATUS = "status"
    ALLOW = "allow"  # a PR adding the hosts setup was refused to `sandbox.egress`
    CONTINUE = "continue"  # a job stopped at its daily budget, resumed from its WIP branch
    ADDRESS_REVIEW = "address_review"  # a review of onloop's PR: suggestions, comments, threads
    APPLY_SUGGESTIONS = "apply_suggestions"  # `/agent apply`: reviewers' suggestion blocks
    # --- schedules (`schedules:` in .github/onloop.yml, started by `onloop beat`) ---
    RUN_FIXERS = "run_fixers"  # the `checks.fix` fixers on the default branch; a PR if changed
    # --- end of schedules ---


# The installation token every job gets (for its one repository): reads, plus onloop's own
# comments. Everything a job changes in the code is done with the person's own token, so no
# installation token can push
# (https://docs.github.com/en/rest/apps/apps#create-an-installation-access-token-for-an-app).
BASE_PERMISSIONS: Mapping[str, str] = MappingProxyType(
    {"metadata": "read", "contents": "read", "pull_requests": "read", "issues": "write"}
)

# Replies in review threads and resolving them
# (https://docs.github.com/en/rest/pulls/comments#create-a-reply-for-a-review-comment).
REVIEW_THREADS: Mapping[str, str] = MappingProxyType({**BASE_PERMISSIONS, "pull_requests": "write"})


@dataclass(frozen=True)
class KindSpec:
    """One job kind. `kind` is a plain string so that a table may hold kinds of its own."""

    kind: str
    verb: str | None  # `/agent <verb>` on a pull request asks for it; None: no such command
    sandboxed: bool  # works in a sandbox, under the concurrency caps
    config_key: str | None = None  # the `commands:` entry of .github/onloop.yml governing it
    pushes_to_head: bool = False  # pushes to the PR's head branch (a fork must allow edits)
    asked_by: str | None = None  # how a person asks for it when not by `/agent <verb>`
    on_issues: bool = False  # `/agent <verb>` also works on an issue's thread, not only a PR's
    permissions: Mapping[str, str] = field(default_factory=lambda: BASE_PERMISSIONS)

    def command(self) -> str:
        """How the person asked for the job, as they would ask again."""
        if self.asked_by:
            return self.asked_by
        return f"`/agent {self.verb}`" if self.verb else f"`{self.kind}`"


Kinds = Mapping[str, KindSpec]

KINDS: Kinds = MappingProxyType(
    {
        spec.kind: spec
        for spec in (
            KindSpec(
                Kind.FIX_ISSUE,
                verb=None,
                sandboxed=True,
                config_key="fix",
                asked_by="the `agent:fix` label",
            ),
            KindSpec(Kind.REBASE_PR, verb="rebase", sandboxed=True, config_key="rebase"),
            KindSpec(
                Kind.FIX_CI,
                verb="fix",
                sandboxed=True,
                config_key="fix",
                pushes_to_head=True,
                permissions=MappingProxyType(
                    {**BASE_PERMISSIONS, "checks": "read", "actions": "read"}
                ),
            ),
            KindSpec(Kind.REVIEW_PR, verb="review", sandboxed=True, config_key="review"),
            KindSpec(
                Kind.CONTINUE, verb="continue", sandboxed=True, config_key="fix", on_issues=True
            ),
            # Both answer in review threads and resolve them as onloop (the installation
            # token, so pull_requests: write); the commit is still the person's.
            KindSpec(
                Kind.ADDRESS_REVIEW,
                verb=None,
                sandboxed=True,
                config_key="fix",
                pushes_to_head=True,
                asked_by="a review of the pull request",
                permissions=REVIEW_THREADS,
            ),
            KindSpec(
                Kind.APPLY_SUGGESTIONS,
                verb="apply",
                sandboxed=True,
                config_key="fix",
                pushes_to_head=True,
                permissions=REVIEW_THREADS,
            ),
            KindSpec(Kind.HELP, verb="help", sandboxed=False),
            KindSpec(Kind.CANCEL, verb="cancel", sandboxed=False),
            KindSpec(Kind.STATUS, verb="status", sandboxed=False),
            # Its commit, push and PR are the person's own (their token); no sandbox is used,
            # but it gets a status comment and check run like the kinds that change code.
            KindSpec(Kind.ALLOW, verb="allow", sandboxed=True, on_issues=True),
            # --- schedules: a schedule's owner asked for it by naming themselves in it ---
            KindSpec(
                Kind.RUN_FIXERS,
                verb=None,
                sandboxed=True,
                config_key="fix",
                asked_by="a `fixers` schedule in `.github/onloop.yml`",
            ),
            # --- end of schedules ---
        )
    }
)


def verbs(kinds: Kinds = KINDS) -> dict[str, str]:
    """`/agent <verb>` → the kind it asks for."""
    return {spec.verb: spec.kind for spec in kinds.values() if spec.verb}


def sandboxed(kinds: Kinds = KINDS) -> tuple[str, ...]:
    """The kinds that work in a sandbox."""
    return tuple(spec.kind for spec in kinds.values() if spec.sandboxed)


SANDBOXED: tuple[str, ...] = sandboxed()


def spec_of(kind: str, kinds: Kinds = KINDS) -> KindSpec | None:
    return kinds.get(kind)


def command_of(kind: str, kinds: Kinds = KINDS) -> str:
    """How a person asks for a job of `kind`, as they would ask again."""
    spec = kinds.get(kind)
    return spec.command() if spec is not None else f"`{kind}`"
