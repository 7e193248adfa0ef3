"""Whether a job trusts the code at the head it runs; tasks/sandbox/trust.py says what follows."""

from __future__ import annotations

from github.Repository import Repository

from tasks.blueprints.pulls import PullRef
from tasks.runner.context import JobFailed
from tasks.runner.people import permitted, role_of
from tasks.sandbox.job import SetupFailed
from tasks.sandbox.trust import HeadTrust

LOG_TAIL = 3000  # characters of setup's output kept with the job


def head_trust(repo: Repository, pull: PullRef | None, required: str) -> HeadTrust:
    """A pull request's head is untrusted when it comes from a fork (or one since deleted)
    or its author lacks `required`, the repository's trigger permission: whoever may run a
    job on it, the code there is someone else's. Work on a branch of the repository with no
    pull request (the default branch) is trusted."""
    if pull is None:
        return HeadTrust.TRUSTED
    if pull.fork or not pull.author:
        return HeadTrust.UNTRUSTED
    if not permitted(role_of(repo, pull.author), required):
        return HeadTrust.UNTRUSTED
    return HeadTrust.TRUSTED


def setup_failed(exc: SetupFailed, trust: HeadTrust) -> JobFailed:
    """The job's failure when `sandbox.setup` failed. A trusted head's log (`log`) and the
    hosts setup was refused are shown in the status comment; an untrusted head's output is
    its author's words, so the comment gets a summary and the log stays in the job's record
    (`setup_log`, which no comment or check run renders)."""
    code, refused = exc.result.exit_code, [str(r) for r in exc.refused]
    tail = exc.result.output[-LOG_TAIL:]
    if trust is HeadTrust.TRUSTED:
        return JobFailed(
            f"the repository's setup command (`sandbox.setup`) failed with exit code "
            f"{code}. {exc.hint}".strip(),
            log=tail,
            refused=refused,
        )
    return JobFailed(
        f"the repository's setup command (`sandbox.setup`) failed with exit code {code} on "
        "this untrusted head (a fork's, or its author lacks the trigger permission), which "
        "runs with no network unless the organisation allows public registries; the log is "
        "on the job's record",
        setup_log=tail,
        refused=refused,
        trust=str(trust),
    )
