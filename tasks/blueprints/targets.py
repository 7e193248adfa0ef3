"""Where onloop may push: never a default branch, nor one that protection or rulesets guard."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import quote

from github import GithubException
from github.Repository import Repository

from app.core.markdown import inline_code

OWN_PREFIX = "onloop/"  # the branches onloop makes for itself (fix_issue, fix_ci)
RULES_PAGE = 100  # the most GitHub lists per page

# Ruleset rules that only say what a pushed commit may contain or be called: GitHub checks
# these itself on every push and rejects a push that breaks one, so they do not put a branch
# off limits (an organisation often applies them to all branches). `required_signatures` is
# one of them too, but onloop must write such a branch through the API (SIGNATURE_RULES).
# Every other rule type — creation, update, deletion, non_fast_forward, pull_request,
# required_status_checks, required_linear_history, required_deployments, merge_queue,
# code_scanning, workflows, and any type GitHub adds later — says that changes to the branch
# go through people, checks or a merge, so onloop does not push there even when the person
# could bypass it
# (https://docs.github.com/en/repositories/configuring-branches-and-merges-in-your-repository/managing-rulesets/available-rules-for-rulesets).
CONTENT_RULES = frozenset(
    {
        "commit_message_pattern",
        "commit_author_email_pattern",
        "committer_email_pattern",
        "branch_name_pattern",
        "tag_name_pattern",
        "file_path_restriction",
        "max_file_path_length",
        "file_extension_restriction",
        "max_file_size",
        "copilot_code_review",
    }
)
# "Require signed commits": GitHub refuses a git push of commits it cannot verify, and the
# commits it makes itself (GraphQL createCommitOnBranch, a merge through the API) are signed,
# so onloop makes its commits there through the API (tasks/blueprints/verified.py).
SIGNATURE_RULES = frozenset({"required_signatures"})


class Signatures(StrEnum):
    """Whether GitHub requires signed commits on a branch, as far as onloop can read it."""

    NOT_REQUIRED = "not_required"  # no rule says so (what onloop assumes when it cannot tell)
    RULESET = "ruleset"  # an active ruleset's `required_signatures` rule
    PROTECTION = "protection"  # classic branch protection's "Require signed commits"
    # Classic protection onloop may not read: that needs the App's `administration: read`,
    # which onloop does not ask for. onloop pushes with git as usual, and when GitHub then
    # refuses unsigned commits it says so (rejected_as_unsigned) instead of guessing.
    UNKNOWN = "unknown"

    @property
    def required(self) -> bool:
        return self in (Signatures.RULESET, Signatures.PROTECTION)


class Refusal(StrEnum):
    """Why onloop does not push to a branch."""

    DEFAULT_BRANCH = "default_branch"
    PROTECTED = "protected"  # classic branch protection (or GitHub says so for another reason)
    RULESET = "ruleset"  # an active ruleset with a rule that guards the branch
    UNSIGNED = "unsigned"  # GitHub refused unsigned commits that onloop could not foresee


@dataclass(frozen=True)
class Target:
    """A branch onloop would push to, and whether it may (`refusal` None)."""

    repo: str  # owner/name holding the branch
    branch: str
    refusal: Refusal | None = None
    rules: tuple[str, ...] = ()  # the guarding rule types, for RULESET
    signatures: Signatures = Signatures.NOT_REQUIRED

    @property
    def allowed(self) -> bool:
        return self.refusal is None

    @property
    def own(self) -> bool:
        return self.branch.startswith(OWN_PREFIX)

    def reason(self) -> str:
        """Why not, as words after the branch's name ("is protected")."""
        if self.refusal == Refusal.DEFAULT_BRANCH:
            return f"is the default branch of {self.repo}"
        if self.refusal == Refusal.RULESET:
            return f"is guarded by a ruleset ({', '.join(self.rules)})"
        return "is protected"

    def message(self) -> str:
        return (
            f"the branch {inline_code(self.branch)} {self.reason()}, and onloop never pushes to "
            "a default or protected branch, so nothing was pushed"
        )


def branch_rules(repo: Repository, branch: str) -> tuple[str, ...]:
    """The types of the active ruleset rules on `branch`. The branch need not exist;
    "evaluate" and disabled rulesets are not listed; a GitHub without rulesets (older GitHub
    Enterprise Server) answers 404
    (https://docs.github.com/en/rest/repos/rules#get-rules-for-a-branch)."""
    found: list[dict[str, Any]] = []
    url = f"{repo.url}/rules/branches/{quote(branch)}"
    page = 1
    while True:
        try:
            _, data = repo.requester.requestJsonAndCheck(
                "GET", url, parameters={"per_page": RULES_PAGE, "page": page}
            )
        except GithubException as exc:
            if exc.status == 404:
                return ()
            raise
        rules = data if isinstance(data, list) else []
        found += rules
        if len(rules) < RULES_PAGE:
            break
        page += 1
    return tuple(sorted({str(rule.get("type")) for rule in found}))


def classic_signatures(repo: Repository, branch: str) -> Signatures:
    """Whether classic protection of the protected `branch` requires signed commits, read
    with `repo`'s token: 404 means no classic protection (the flag came from a ruleset); 403
    means the token lacks `administration: read`, so onloop cannot tell
    (https://docs.github.com/en/rest/branches/branch-protection#get-commit-signature-protection)."""
    url = f"{repo.url}/branches/{quote(branch)}/protection/required_signatures"
    try:
        _, data = repo.requester.requestJsonAndCheck("GET", url)
    except GithubException as exc:
        if exc.status == 404 and "not protected" in str(exc.data).lower():
            return Signatures.NOT_REQUIRED
        if exc.status in (403, 404):
            return Signatures.UNKNOWN
        raise
    enabled = isinstance(data, dict) and data.get("enabled") is True
    return Signatures.PROTECTION if enabled else Signatures.NOT_REQUIRED


def protected(repo: Repository, branch: str) -> bool:
    """GitHub's `protected` flag of the branch (False when it does not exist yet). It is set by
    classic branch protection and by any active ruleset, even one with content rules only
    (https://docs.github.com/en/rest/branches/branches#get-a-branch)."""
    try:
        return bool(repo.get_branch(branch).protected)
    except GithubException as exc:
        if exc.status == 404:
            return False
        raise


def push_target(repo: Repository, branch: str) -> Target:
    """Whether onloop may push to `branch` of `repo` (read with a token that can see it).

    Its own `onloop/*` branches it may, unless a ruleset guards them: their `protected` flag
    may come from an organisation's content rules alone, and GitHub itself still rejects a
    push that classic protection forbids. Any other branch with the flag is refused. A
    branch where GitHub requires signed commits is allowed, with `signatures` saying why."""
    name = repo.full_name
    if branch == repo.default_branch:
        return Target(name, branch, Refusal.DEFAULT_BRANCH)
    found = branch_rules(repo, branch)
    rules = tuple(sorted(set(found) - CONTENT_RULES - SIGNATURE_RULES))
    if rules:
        return Target(name, branch, Refusal.RULESET, rules)
    signed = Signatures.RULESET if SIGNATURE_RULES & set(found) else Signatures.NOT_REQUIRED
    target = Target(name, branch, signatures=signed)
    if not target.own and protected(repo, branch):
        return Target(name, branch, Refusal.PROTECTED)
    if target.own and not signed.required and protected(repo, branch):
        return Target(name, branch, signatures=classic_signatures(repo, branch))
    return target


def rejected_as_protected(branch: str, output: str) -> str | None:
    """What to say when git's output shows GitHub refused a push for protection the API did
    not show: GH006 (branch protection) or GH013 (rulesets)
    (https://docs.github.com/en/repositories/configuring-branches-and-merges-in-your-repository/managing-rulesets/troubleshooting-rules)."""
    if "GH006" not in output and "GH013" not in output:
        return None
    return (
        f"GitHub refused the push to {inline_code(branch)} as a protected branch, so nothing "
        "was pushed"
    )


def rejected_as_unsigned(branch: str, output: str) -> str | None:
    """What to say when GitHub refused a push because the branch requires signed commits
    that onloop could not see beforehand (classic protection it may not read)."""
    if "GH006" not in output and "GH013" not in output:
        return None
    if "verified signatures" not in output and "required_signatures" not in output:
        return None
    return (
        f"GitHub refused the push to {inline_code(branch)} because the branch requires signed "
        "commits, which onloop could not see beforehand (reading classic branch protection "
        "needs the App's `administration: read` permission); nothing was pushed. Add "
        "`commits: verified` to `.github/onloop.yml` on the default branch, so onloop makes "
        "its commits through GitHub's API, signed and Verified, then ask again"
    )
