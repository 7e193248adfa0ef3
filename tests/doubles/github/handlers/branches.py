"""Branch protection and rulesets: what the API says of a branch, and the pushes git refuses."""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.doubles.github.api import ApiError, Ctx, Response, paginate
from tests.doubles.github.auth import authorize
from tests.doubles.github.model import Repo

RULES_ENV = "DOUBLE_PUSH_RULES"  # the push rules of the repository, as JSON, for the hook
ZERO = "0" * 40
PROJECT = Path(__file__).resolve().parents[4]  # where `tests` is importable from
HOOK = f"""#!{sys.executable}
import sys
sys.path.insert(0, {str(PROJECT)!r})
from tests.doubles.github.handlers.branches import pre_receive
sys.exit(pre_receive(sys.stdin.read().splitlines()))
"""


@dataclass
class Ruleset:
    id: int
    repo: str  # full name
    name: str
    include: list[str]  # branch names or fnmatch patterns, `~DEFAULT_BRANCH`, `~ALL`
    rules: list[str]  # rule types: update, non_fast_forward, pull_request, max_file_size…
    enforcement: str = "active"  # active | evaluate | disabled

    def applies(self, branch: str, default: str) -> bool:
        if self.enforcement != "active":
            return False
        for pattern in self.include:
            if pattern == "~ALL" or (pattern == "~DEFAULT_BRANCH" and branch == default):
                return True
            if fnmatch.fnmatchcase(branch, pattern.removeprefix("refs/heads/")):
                return True
        return False


@dataclass
class Protections:
    """Classic branch protection and rulesets of the double's world (`state.protections`)."""

    protected: dict[str, set[str]] = field(default_factory=dict)  # repo (lower) → branches
    rulesets: list[Ruleset] = field(default_factory=list)
    signed: dict[str, set[str]] = field(default_factory=dict)  # classic required_signatures

    def require_signatures(self, repo: str, branch: str) -> None:
        """Classic protection on `branch` whose one rule is "Require signed commits": pushes
        of commits without a signature are refused (GH006), others go through."""
        self.signed.setdefault(repo.lower(), set()).add(branch)

    def signatures_required(self, repo: Repo, branch: str) -> bool:
        return branch in self.signed.get(repo.full_name.lower(), set()) or any(
            kind == "required_signatures" for _, kind in self.rules_for(repo, branch)
        )

    def protect(self, repo: str, branch: str) -> None:
        """Classic branch protection on `branch` of `repo` (exact name)."""
        self.protected.setdefault(repo.lower(), set()).add(branch)

    def add_ruleset(
        self, repo: str, include: list[str], rules: list[str], *, enforcement: str = "active"
    ) -> Ruleset:
        ruleset = Ruleset(
            len(self.rulesets) + 1, repo, f"ruleset {len(self.rulesets) + 1}", include, rules
        )
        ruleset.enforcement = enforcement
        self.rulesets.append(ruleset)
        return ruleset

    def classic(self, repo: Repo, branch: str) -> bool:
        return branch in self.protected.get(repo.full_name.lower(), set())

    def rules_for(self, repo: Repo, branch: str) -> list[tuple[Ruleset, str]]:
        return [
            (r, kind)
            for r in self.rulesets
            if r.repo.lower() == repo.full_name.lower() and r.applies(branch, repo.default_branch)
            for kind in r.rules
        ]

    def is_protected(self, repo: Repo, branch: str) -> bool:
        """GitHub's `protected` flag: classic protection or any active ruleset on the branch."""
        signed = branch in self.signed.get(repo.full_name.lower(), set())
        return self.classic(repo, branch) or signed or bool(self.rules_for(repo, branch))

    def hook_env(self, root: Path, repo: Repo, env: dict[str, str]) -> dict[str, str]:
        """git config (as environment) adding the pre-receive hook to a push into `repo`,
        after the GIT_CONFIG_* entries `env` has already."""
        name = repo.full_name.lower()
        rulesets = [
            r for r in self.rulesets if r.repo.lower() == name and r.enforcement == "active"
        ]
        if not self.protected.get(name) and not rulesets and not self.signed.get(name):
            return {}
        hooks = root / "push-hooks"
        hook = hooks / "pre-receive"
        if not hook.exists():
            hooks.mkdir(exist_ok=True)
            hook.write_text(HOOK)
            hook.chmod(0o755)
        n = int(env.get("GIT_CONFIG_COUNT", "0"))
        rules = {
            "default": repo.default_branch,
            "protected": sorted(self.protected.get(name, set())),
            "signed": sorted(self.signed.get(name, set())),
            "rulesets": [{"include": r.include, "rules": r.rules} for r in rulesets],
        }
        return {
            "GIT_CONFIG_COUNT": str(n + 1),
            f"GIT_CONFIG_KEY_{n}": "core.hooksPath",
            f"GIT_CONFIG_VALUE_{n}": str(hooks),
            RULES_ENV: json.dumps(rules),
        }


def branch_rules(ctx: Ctx) -> Response:
    """GET /repos/{o}/{r}/rules/branches/{branch}: the active rules on a branch, existing or
    not (https://docs.github.com/en/rest/repos/rules#get-rules-for-a-branch)."""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "metadata", "read")
    branch = ctx.params["branch"]
    if any(c in branch for c in "*?["):
        raise ApiError(422, "Branch name cannot contain wildcard characters")
    rules: list[dict[str, Any]] = [
        {
            "type": kind,
            "ruleset_source_type": "Repository",
            "ruleset_source": ruleset.repo,
            "ruleset_id": ruleset.id,
        }
        for ruleset, kind in ctx.state.protections.rules_for(repo, branch)
    ]
    return paginate(ctx, rules)


def required_signatures(ctx: Ctx) -> Response:
    """GET /repos/{o}/{r}/branches/{branch}/protection/required_signatures: 404 "Branch not
    protected" without classic protection, else whether it requires signed commits
    (https://docs.github.com/en/rest/branches/branch-protection#get-commit-signature-protection)."""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "administration", "read", role="admin")
    branch, protections = ctx.params["branch"], ctx.state.protections
    signed = branch in protections.signed.get(repo.full_name.lower(), set())
    if not (signed or protections.classic(repo, branch)):
        raise ApiError(404, "Branch not protected")
    return Response(200, {"url": f"{ctx.base_url}{ctx.path}", "enabled": signed})


def unsigned(new: str) -> list[str]:
    """The commits a push brings (reachable from `new`, from no ref yet) without a signature;
    run in the repository by the pre-receive hook. The double's own commits made through
    GraphQL createCommitOnBranch carry one (GitHub's web-flow signature)."""
    listed = subprocess.run(
        ["git", "rev-list", new, "--not", "--all"], capture_output=True, text=True, check=True
    ).stdout.split()
    found = []
    for sha in listed:
        raw = subprocess.run(
            ["git", "cat-file", "commit", sha], capture_output=True, text=True, check=True
        ).stdout
        header = raw.split("\n\n", 1)[0]
        if not any(line.startswith("gpgsig ") for line in header.splitlines()):
            found.append(sha)
    return found


def _broken(kind: str, old: str, new: str) -> bool:
    """Whether the ref update `old` → `new` breaks a rule of type `kind`."""
    if kind == "creation":
        return old == ZERO
    if kind == "deletion":
        return new == ZERO
    if kind in ("update", "pull_request", "required_status_checks"):
        return old != ZERO and new != ZERO
    if kind == "required_signatures":
        return new != ZERO and bool(unsigned(new))
    if kind == "non_fast_forward" and old != ZERO and new != ZERO:
        return subprocess.run(["git", "merge-base", "--is-ancestor", old, new]).returncode != 0
    return False


def pre_receive(lines: list[str]) -> int:
    """GitHub's own checks of a push, as the double's pre-receive hook runs them: classic
    protection (GH006) refuses every update of its branch, as "Require a pull request before
    merging" does; a ruleset (GH013) refuses what its rules say
    (https://docs.github.com/en/repositories/configuring-branches-and-merges-in-your-repository/managing-rulesets/available-rules-for-rulesets)."""
    rules = json.loads(os.environ.get(RULES_ENV) or "{}")
    rulesets = [Ruleset(0, "", "", r["include"], r["rules"]) for r in rules.get("rulesets", [])]
    status = 0
    for line in lines:
        old, new, ref = line.split()
        if not ref.startswith("refs/heads/"):
            continue
        branch = ref.removeprefix("refs/heads/")
        if branch in rules.get("protected", []):
            print(f"error: GH006: Protected branch update failed for {ref}.", file=sys.stderr)
            status = 1
            continue
        if branch in rules.get("signed", []) and new != ZERO and unsigned(new):
            print(f"error: GH006: Protected branch update failed for {ref}.", file=sys.stderr)
            print("error: Commits must have verified signatures.", file=sys.stderr)
            status = 1
            continue
        for ruleset in rulesets:
            hits = [k for k in ruleset.rules if _broken(k, old, new)]
            if hits and ruleset.applies(branch, rules.get("default", "")):
                print(f"error: GH013: Repository rule violations found for {ref}.", file=sys.stderr)
                print(f"error: - rules: {', '.join(hits)}", file=sys.stderr)
                status = 1
    return status
