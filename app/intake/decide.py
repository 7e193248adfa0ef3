"""`decide(event, repo_config)`: the pure step that turns a delivery into a command or nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.core.kinds import KINDS, Kind, Kinds, verbs
from app.intake.commands import (
    CancelStale,
    Command,
    CommandParams,
    InstallationChange,
    RevokeAuthorization,
)
from app.intake.events import Event
from app.intake.routing import Router
from app.policy.repo_config import RepoConfig

Action = Command | CancelStale | InstallationChange | RevokeAuthorization

# Why an event was ignored: named constants, recorded as the delivery's outcome.
IGNORED_UNROUTED = "ignored: event not handled"
IGNORED_BOT_SENDER = "ignored: sender is a bot"
IGNORED_OTHER_LABEL = "ignored: not the fix label"
IGNORED_PULL_REQUEST_LABEL = "ignored: label on a pull request"
IGNORED_NOT_A_COMMAND = "ignored: comment is not an /agent command"
IGNORED_NOT_ON_PR = "ignored: /agent command on an issue, not a pull request"
IGNORED_NOT_FAILURE = "ignored: conclusion is not failure"
IGNORED_AUTO_FIX_OFF = "ignored: auto_fix_ci is off for this repository"
IGNORED_NO_MATCHING_PR = "ignored: no pull request has this head"
IGNORED_NO_REPOSITORY = "ignored: payload names no repository"
IGNORED_CLOSED = "ignored: issue or pull request is closed"
IGNORED_OWN_CHECKS = "ignored: onloop's own check suite"

IGNORED = frozenset(v for k, v in dict(globals()).items() if k.startswith("IGNORED_"))

router: Router[Action | str] = Router()


def _is_bot(user: Mapping[str, Any]) -> bool:
    return user.get("type") == "Bot" or str(user.get("login", "")).endswith("[bot]")


def _base(event: Event) -> dict[str, Any]:
    repo = event.data.get("repository") or {}
    sender = event.sender
    return {
        "repo": str(repo.get("full_name")),
        "repo_id": repo.get("id"),
        "installation_id": event.installation_id,
        "requested_by": str(sender.get("login", "")),
        "requested_by_id": sender.get("id"),
    }


@router.register("issues", "labeled")
def _issue_labeled(event: Event, config: RepoConfig, kinds: Kinds) -> Action | str:
    issue = event.data.get("issue") or {}
    label = (event.data.get("label") or {}).get("name")
    if label != config.fix_label:
        return IGNORED_OTHER_LABEL
    if issue.get("pull_request"):
        return IGNORED_PULL_REQUEST_LABEL
    if issue.get("state") == "closed":
        return IGNORED_CLOSED
    return Command(kind=Kind.FIX_ISSUE, numbers=(int(issue["number"]),), **_base(event))


def parse_command(body: str) -> tuple[str, str] | None:
    """`/agent <verb> [args]` on the comment's first non-empty line → (verb, args)."""
    for line in body.strip().splitlines()[:1]:
        words = line.strip().split(maxsplit=2)
        if not words or words[0].lower() != "/agent":
            return None
        verb = words[1].lower() if len(words) > 1 else "help"
        return verb, (words[2] if len(words) > 2 else "")
    return None


@router.register("issue_comment", "created")
def _comment_created(event: Event, config: RepoConfig, kinds: Kinds) -> Action | str:
    issue = event.data.get("issue") or {}
    comment = event.data.get("comment") or {}
    if _is_bot(comment.get("user") or {}):
        return IGNORED_BOT_SENDER
    parsed = parse_command(str(comment.get("body") or ""))
    if parsed is None:
        return IGNORED_NOT_A_COMMAND
    verb, args = parsed
    # Issue comments and PR conversation comments share this event; only PRs carry
    # `issue.pull_request` (https://docs.github.com/en/webhooks/webhook-events-and-payloads#issue_comment).
    if not issue.get("pull_request"):
        return IGNORED_NOT_ON_PR
    known = verbs(kinds)
    kind = known.get(verb, Kind.HELP)
    params: CommandParams = {"verb": verb, "args": args}
    if verb not in known:
        params["unknown_verb"] = verb
    elif not config.allows(verb):
        kind, params["refused_verb"] = Kind.HELP, verb
    return Command(
        kind=kind,
        numbers=(int(issue["number"]),),
        comment_id=comment.get("id"),
        params=params,
        **_base(event),
    )


def _failed_run(event: Event, config: RepoConfig, run: Mapping[str, Any]) -> Action | str:
    if run.get("conclusion") != "failure":
        return IGNORED_NOT_FAILURE
    if not config.auto_fix_ci:
        return IGNORED_AUTO_FIX_OFF
    repo = event.data.get("repository") or {}
    head_sha = run.get("head_sha")
    head_repo = run.get("head_repository") or {}
    head_repo_id = head_repo.get("id", repo.get("id"))
    prs = [
        int(pr["number"])
        for pr in run.get("pull_requests") or []
        if (pr.get("head") or {}).get("sha") == head_sha
        and ((pr.get("head") or {}).get("repo") or {}).get("id") == head_repo_id
    ]
    is_fork = head_repo_id != repo.get("id")
    on_default = run.get("head_branch") == repo.get("default_branch") and not is_fork
    if run.get("pull_requests") and not prs:
        return IGNORED_NO_MATCHING_PR  # every listed PR has moved on to a newer head
    params: CommandParams = {
        "automatic": True,
        "run_kind": event.name,
        "run_id": run.get("id"),
        "head_branch": run.get("head_branch"),
        "head_repo_id": head_repo_id,
        # GitHub sends an empty `pull_requests` for runs from forks
        # (https://github.com/orgs/community/discussions/25220): the worker finds them by sha.
        "find_prs": not prs and is_fork,
        "default_branch": on_default and not prs,
    }
    base = _base(event)
    base["requested_by"] = base["requested_by"] or "github-actions"
    return Command(kind=Kind.FIX_CI, numbers=tuple(prs), head_sha=head_sha, params=params, **base)


@router.register("check_suite", "completed")
def _check_suite(event: Event, config: RepoConfig, kinds: Kinds) -> Action | str:
    return _failed_run(event, config, event.data.get("check_suite") or {})


@router.register("workflow_run", "completed")
def _workflow_run(event: Event, config: RepoConfig, kinds: Kinds) -> Action | str:
    return _failed_run(event, config, event.data.get("workflow_run") or {})


@router.register("pull_request", "synchronize")
@router.register("pull_request", "closed")
def _pull_request_moved(event: Event, config: RepoConfig, kinds: Kinds) -> Action | str:
    pr = event.data.get("pull_request") or {}
    head = None if event.action == "closed" else (pr.get("head") or {}).get("sha")
    return CancelStale(
        repo=str((event.data.get("repository") or {}).get("full_name")),
        number=int(pr.get("number") or event.data.get("number") or 0),
        head_sha=head,
        reason=f"pull request {event.action}",
    )


def _installation(event: Event, config: RepoConfig, kinds: Kinds) -> Action | str:
    inst = event.data.get("installation") or {}
    account = inst.get("account") or {}
    added = event.data.get("repositories") or event.data.get("repositories_added") or []
    removed = event.data.get("repositories_removed") or []
    return InstallationChange(
        installation_id=int(inst["id"]),
        action=str(event.action),
        account_login=str(account.get("login", "")),
        account_type=account.get("type"),
        repositories=tuple(str(r.get("full_name")) for r in added),
        removed=tuple(str(r.get("full_name")) for r in removed),
    )


router.register("installation")(_installation)
router.register("installation_repositories")(_installation)


@router.register("github_app_authorization", "revoked")
def _authorization_revoked(event: Event, config: RepoConfig, kinds: Kinds) -> Action | str:
    # https://docs.github.com/en/webhooks/webhook-events-and-payloads#github_app_authorization
    return RevokeAuthorization(
        user_id=int(event.sender.get("id", 0)), login=str(event.sender.get("login", ""))
    )


# Installation and authorisation events are the App's own bookkeeping and name no
# repository; bots are ignored everywhere else, our own `<slug>[bot]` above all.
_ANY_SENDER = {"installation", "installation_repositories", "github_app_authorization"}


def _own_suite(event: Event, own_app_id: int | None) -> bool:
    # Apps with checks:write get every check suite, their own too
    # (https://docs.github.com/en/webhooks/webhook-events-and-payloads#check_suite): a failed
    # `onloop/*` check run must not start a CI fix of itself.
    app = (event.data.get("check_suite") or {}).get("app") or {}
    return own_app_id is not None and app.get("id") == own_app_id


def explain(
    event: Event, config: RepoConfig, own_app_id: int | None = None, kinds: Kinds = KINDS
) -> Action | str:
    """Like `decide`, but says why an event was ignored (one of the IGNORED_* constants).
    `own_app_id` is onloop's App id, whose own check suites are ignored; `kinds` the job
    kinds that `/agent <verb>` may ask for."""
    handler = router.handler_for(event)
    if event.name == "check_suite" and _own_suite(event, own_app_id):
        return IGNORED_OWN_CHECKS
    if handler is None:
        return IGNORED_UNROUTED
    if event.name not in _ANY_SENDER:
        if _is_bot(event.sender) and event.name not in ("check_suite", "workflow_run"):
            return IGNORED_BOT_SENDER
        if event.repo is None:
            return IGNORED_NO_REPOSITORY
    return handler(event, config, kinds)


def decide(
    event: Event, config: RepoConfig, own_app_id: int | None = None, kinds: Kinds = KINDS
) -> Action | None:
    """The command an event asks for, or None when it is ignored. Pure: no I/O."""
    result = explain(event, config, own_app_id, kinds)
    return None if isinstance(result, str) else result
