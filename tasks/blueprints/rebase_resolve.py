"""Conflicts a rebase stops on, settled by the agent in the sandbox, then checked in a fresh one."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import tasks.agent.workspace as ws
from app.core.kinds import Kind
from app.core.markdown import inline_code
from tasks.agent import Agent, AgentTask, Quoted, budget_from
from tasks.blueprints.budget import agent_budget, record_agent
from tasks.blueprints.checks import failures, plan, run_all
from tasks.blueprints.common import Work
from tasks.blueprints.receipts import (
    CheckRun,
    Hunk,
    Resolution,
    checks_markdown,
    classify,
    hunks_markdown,
)
from tasks.git.conflicts import conflicts, has_markers
from tasks.git.process import git
from tasks.git.replay import patch_ids
from tasks.sandbox.base import Sandbox
from tasks.sandbox.trust import HeadTrust

MAX_STOPS = 20  # commits the rebase may stop on before onloop gives up
QUOTED_CHARS = 60_000  # of the conflicted files, for the agent


@dataclass
class Settled:
    """What became of the conflicts: `rebased` when every stop was resolved and the rebase
    finished; `checks` (and `failed`, their output) once they ran on the result."""

    hunks: list[Hunk] = field(default_factory=list)
    rebased: bool = False
    reason: str = ""  # why not rebased
    checks: list[CheckRun] = field(default_factory=list)
    failed: str = ""  # the failed checks' output, folded
    stops: int = 0  # commits the rebase stopped on (and the agent resolved)

    @property
    def passed(self) -> bool:
        return self.rebased and all(c.ok for c in self.checks)


def conflicted(box: Sandbox) -> list[str]:
    """The unmerged files, NUL-separated by git: a name may hold spaces or line breaks."""
    listed = box.exec(["git", "diff", "--name-only", "--diff-filter=U", "-z"])
    return sorted({name for name in listed.stdout.split("\0") if name})


def _text(box: Sandbox, path: str) -> str:
    try:
        return ws.read_text(box, path)
    except ws.ToolError:
        return ""  # binary, too large or deleted: no markers to read


def _rev(box: Sandbox, name: str) -> str:
    return box.exec(["git", "rev-parse", "--verify", "--quiet", name]).stdout.strip()


def _task(files: Sequence[str], texts: dict[str, str]) -> AgentTask:
    quoted = "\n".join(f"--- {path}\n{texts[path]}" for path in files)[:QUOTED_CHARS]
    return AgentTask(
        kind=Kind.REBASE_PR,
        title="Resolve the conflicts this rebase stopped on",
        body=f"{len(files)} file(s) hold conflict markers; they are quoted below.",
        quoted=(Quoted("the conflicted files, with git's conflict markers", quoted),),
    )


def resolve(
    work: Work, box: Sandbox, agent: Agent, base: str, git: Sequence[str], env: dict[str, str]
) -> Settled:
    """Rebase onto `base` again, and at each stop let the agent edit the conflicted files;
    onloop stages them and continues. Aborted (the branch untouched) when the agent stops
    early, leaves a marker, or moves HEAD itself."""
    ctx, settled = work.ctx, Settled()
    argv = [*git, "-c", "merge.conflictStyle=merge"]
    done = box.exec([*argv, "rebase", "--no-autosquash", base], env=env)
    for _ in range(MAX_STOPS):
        if done.ok:
            settled.rebased = True
            return settled
        files, commit, head = conflicted(box), _rev(box, "REBASE_HEAD"), _rev(box, "HEAD")
        if not files or not commit:
            return _abort(box, settled, "the rebase stopped without conflicted files")
        settled.stops += 1
        before = {path: _text(box, path) for path in files}
        found = [(path, c) for path in files for c in conflicts(before[path])]
        budget = agent_budget(ctx, work.config, budget_from(ctx.settings))
        result = agent.run(box, _task(files, before), budget, ctx.cancel)
        record_agent(ctx, result)
        after = {path: _text(box, path) for path in files}
        for path, c in found:
            how = Resolution.UNRESOLVED
            if result.finished and not has_markers(after[path]):
                how = classify(c.ours, c.theirs, after[path])
            settled.hunks.append(Hunk(path, c.line, commit, c.ours, c.theirs, how))
        found_paths = {path for path, _ in found}
        for path in files:  # a conflict without markers (deleted on one side, binary)
            if path not in found_paths:
                how = Resolution.WHOLE_FILE if result.finished else Resolution.UNRESOLVED
                settled.hunks.append(Hunk(path, 0, commit, "", "", how))
        if not result.finished:
            return _abort(box, settled, f"the agent stopped: {result.stopped}")
        if _rev(box, "HEAD") != head or _rev(box, "REBASE_HEAD") != commit:
            return _abort(box, settled, "the agent moved the rebase itself")
        left = [path for path in files if has_markers(after[path])]
        if left:
            return _abort(box, settled, "conflict markers are left in " + ", ".join(left))
        box.exec(["git", "add", "--all", "--", *files])
        done = box.exec([*argv, "rebase", "--continue"], env=env)
    return _abort(box, settled, f"the rebase stopped more than {MAX_STOPS} times")


def _abort(box: Sandbox, settled: Settled, reason: str) -> Settled:
    box.exec(["git", "rebase", "--abort"])
    settled.rebased, settled.reason = False, reason
    return settled


def strays(work: Work, settled: Settled, base: str, old: str, new: str) -> list[str]:
    """Why the resolved rebase holds more than the PR's commits replayed: it must have as
    many commits as `base..old`, and only as many of them may differ from the PR's own
    (patch ids, tasks/git/replay.py) as the rebase stopped on. The guard's replay check
    would refuse the resolved ones; this keeps the rest of it."""
    cache, name = work.place.cache, work.repo.full_name
    deadline = time.monotonic() + 120

    def left() -> float:
        return max(1.0, deadline - time.monotonic())

    with cache.lock(name, shared=True):
        mirror = cache.mirror_path(name)
        theirs = Counter(pid for _, pid in patch_ids(mirror, f"{base}..{old}", left))
        ours = patch_ids(mirror, f"{base}..{new}", left)
        counts = [
            int(git(["rev-list", "--count", f"{base}..{rev}"], mirror).stdout.strip())
            for rev in (old, new)
        ]
    changed = []
    for commit, pid in ours:
        if theirs[pid] > 0:
            theirs[pid] -= 1
        else:
            changed.append(commit)
    found = []
    if counts[0] != counts[1]:
        found.append(
            f"the resolved rebase has {counts[1]} commits; the pull request has {counts[0]}"
        )
    if len(changed) > settled.stops:
        short = ", ".join(c[:12] for c in changed)
        found.append(
            f"{len(changed)} commits differ from the pull request's ({short}), but the rebase "
            f"stopped on only {settled.stops}"
        )
    return found


def check(work: Work, settled: Settled, sha: str, trust: HeadTrust, refs: Sequence[str]) -> None:
    """Run the repository's checks on the resolved head `sha` in a sandbox of its own (with
    setup, as a change's checks run): nothing there can touch the commits already collected."""
    with work.sandbox(sha, trust=trust, refs=refs) as js:
        outcomes = run_all(js.sandbox, plan(js.sandbox, work.config).validation)
    settled.checks = [CheckRun(o.command, o.result.exit_code) for o in outcomes]
    settled.failed = failures(outcomes)


def unresolved_report(head: str, base: str, settled: Settled) -> str:
    """The agent's resolution did not stand (or its checks failed): nothing was pushed."""
    if settled.rebased:
        why = "its resolution of the conflicts did not pass the checks"
    else:
        why = f"the conflicts were not resolved ({inline_code(settled.reason)})"
    parts = [f"onloop rebased {head} onto {base}, but {why}; nothing was pushed and {head} "]
    parts[0] += "is untouched."
    parts.append(hunks_markdown(settled.hunks))
    if settled.rebased:
        parts.append(checks_markdown(settled.checks))
    if settled.failed:
        parts.append(settled.failed)
    return "\n\n".join(parts)
