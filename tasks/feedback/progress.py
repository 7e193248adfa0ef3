"""How a job reads to a person: its status comment's text, its check run's output, next steps."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.core.kinds import Kind, command_of
from app.core.markdown import defang, plain
from app.github.comments import details, fold
from app.intake.commands import Command
from app.policy import egress_proposal
from app.store.models import Job, JobState
from tasks.runner.outcomes import Overdue
from tasks.runner.steps import StepRecord, StepState

ICONS = {
    StepState.RUNNING: "⏳",
    StepState.SUCCEEDED: "✅",
    StepState.FAILED: "❌",
    StepState.CANCELLED: "⏹️",
    "pending": "◻️",
    JobState.WAITING_FOR_AUTHORIZATION: "⏸️",
}
BEFORE_WORK = ("policy", "authorization")
CONCLUSIONS = ("success", "neutral", "failure", "cancelled", "action_required", "skipped")
LOG_KEYS = ("log", "setup_output", "output")  # where a failed job's result keeps its log
LIMIT = 60_000  # GitHub's comment and check run output limit is 65535 characters


def who(job: Job) -> str:
    command = Command.from_params(job.params or {})
    automatic = job.kind == Kind.FIX_CI and command.params.get("automatic")
    if automatic:
        return "a failing CI run"
    asker = command.requested_by
    if job.kind == Kind.ADDRESS_REVIEW and asker and asker != job.requested_by:
        return f"@{asker}, in the name of @{job.requested_by}"  # the PR owner's commit
    return f"@{job.requested_by}"


def job_ref(job: Job, page: str = "") -> str:
    """ "job #12", linked to the job's page on onloop when its address is known."""
    return f"[job #{job.id}]({page})" if page else f"job #{job.id}"


def work_started(steps: Sequence[StepRecord]) -> bool:
    """Past policy and authorisation: the person may act and onloop acts for them."""
    for step in steps:
        if step.name not in BEFORE_WORK:
            return True
        if step.name == "authorization" and step.state == StepState.SUCCEEDED:
            return True
    return False


def _duration(step: StepRecord) -> str:
    return f" · {step.duration:.1f} s" if step.duration is not None else ""


def step_lines(steps: Sequence[StepRecord], plan: Sequence[str] = ()) -> list[str]:
    """One Markdown list item per step done or running, then the planned ones still to come."""
    lines = [f"- {ICONS.get(s.state, '•')} {s.name}{_duration(s)}" for s in steps]
    done = [s.name for s in steps]
    rest = list(plan)
    for name in done:  # a plan is a sequence: skip what has run, in order
        if name in rest:
            rest = rest[rest.index(name) + 1 :]
    lines += [f"- {ICONS['pending']} {name}" for name in rest]
    return lines


def position(steps: Sequence[StepRecord], plan: Sequence[str]) -> str:
    """ "step 3 of 7: **lint**" for the running (or last) step."""
    if not steps:
        return "starting"
    k, name = len(steps), steps[-1].name
    return f"step {k} of {max(len(plan), k)}: **{name}**" if plan else f"step {k}: **{name}**"


def links(result: Mapping[str, Any], extra: Mapping[str, str | None]) -> str:
    """ " · [review](…) · [check run](…)" from the result's `*_url` values and `extra`."""
    found = {
        k[: -len("_url")].replace("_", " "): v for k, v in result.items() if k.endswith("_url")
    }
    found |= {k: v for k, v in extra.items() if v}
    return "".join(f" · [{name}]({url})" for name, url in found.items() if isinstance(url, str))


def running_text(job: Job, steps: Sequence[StepRecord], plan: Sequence[str], page: str = "") -> str:
    return "\n".join(
        [
            f"{ICONS['running']} **Working** on {command_of(job.kind)} from {who(job)} "
            f"({job_ref(job, page)}), {position(steps, plan)}",
            "",
            *step_lines(steps, plan),
            "",
            "<sub>`/agent status` shows the state of onloop's jobs here; "
            "`/agent cancel` stops them.</sub>",
        ]
    )


def queued_text(job: Job, reason: str, position: int | None, page: str = "") -> str:
    """A job held back before it starts (the caps on running jobs)."""
    place = f"; it is number {position} in line" if position else ""
    return (
        f"🕐 **Queued**: {command_of(job.kind)} from {who(job)} ({job_ref(job, page)}) waits "
        f"for a free slot ({reason}){place}. It starts by itself; `/agent cancel` takes it off "
        "the queue."
    )


def next_step(job: Job, state: str, result: Mapping[str, Any]) -> str:
    """What the person can do now, after a job that did not succeed."""
    again = command_of(job.kind)
    error = str(result.get("error") or "")
    if state == JobState.CANCELLED:
        return f"Ask again with {again} when you want it."
    if state == JobState.WAITING_FOR_AUTHORIZATION:
        return f"@{job.requested_by} authorises onloop; the job then resumes by itself."
    if result.get("rule") == "sandbox_image":  # the operator's image, not the repository
        return (
            f"Nothing in your repository: tell the people who run onloop (job #{job.id}); "
            f"once they have fixed the sandbox image, try again with {again}."
        )
    if "sandbox.setup" in error:
        return (
            "Fix `sandbox.setup` in `.github/onloop.yml` on the default branch (its output is "
            f"below), then try again with {again}."
        )
    if "/agent" in error or "`.github/onloop.yml`" in error:
        return ""  # the message already says it
    if error.startswith("internal error"):
        return (
            f"This is a fault in onloop or GitHub, not in your pull request. Try again with "
            f"{again}; if it keeps failing, tell the people who run onloop (job #{job.id})."
        )
    if result.get("conflicts"):
        return "Resolve the conflicts listed above, or rebase the branch locally."
    return f"Fix the cause above, then try again with {again}; `/agent help` lists the commands."


def final_text(
    job: Job,
    steps: Sequence[StepRecord],
    state: str,
    result: Mapping[str, Any],
    extra_links: Mapping[str, str | None],
    authorize_url: str = "",
    page: str = "",
) -> str:
    """The last word of a job: its outcome, links, what to do next, folded details; then,
    when setup was refused hosts, what would allow them (app/policy/egress_proposal.py)."""
    text = _final_text(job, steps, state, result, extra_links, authorize_url, page)
    proposal = result.get("egress_proposal")
    said = egress_proposal.render(proposal) if isinstance(proposal, Mapping) else ""
    return f"{text}\n\n{said}" if said else text


def _final_text(
    job: Job,
    steps: Sequence[StepRecord],
    state: str,
    result: Mapping[str, Any],
    extra_links: Mapping[str, str | None],
    authorize_url: str = "",
    page: str = "",
) -> str:
    ran = f"{command_of(job.kind)} from {who(job)} ({job_ref(job, page)})"
    more = links(result, extra_links)
    total = sum(s.duration or 0.0 for s in steps)
    folded = fold(f"{len(steps)} steps · {total:.1f} s", "\n".join(step_lines(steps)))
    if state == JobState.SUCCEEDED:
        summary = result_summary(result)
        head = f"{ICONS['succeeded']} **Done**: {ran}{more}" + (f"\n\n{summary}" if summary else "")
        noted = notes(result)
        return f"{head}\n\n{noted}\n\n{folded}" if noted else f"{head}\n\n{folded}"
    if state == JobState.CANCELLED:
        reason = str(result.get("reason") or "cancelled")
        hint = next_step(job, state, result)
        return f"{ICONS['cancelled']} **Cancelled**: {ran}, {reason}.{more} {hint}"
    if state == JobState.WAITING_FOR_AUTHORIZATION:
        why = str(result.get("waiting") or "it has no valid authorisation")
        return (
            f"{ICONS[state]} **Waiting**: {ran} acts in the name of @{job.requested_by}, and "
            f"onloop cannot do that now: {why}. @{job.requested_by}, "
            f"[authorise onloop]({authorize_url}) and the job resumes by itself."
        )
    failed = next((s for s in reversed(steps) if s.state == StepState.FAILED), None)
    where = f" at step **{failed.name}**" if failed else ""
    error = defang(str(result.get("error") or "it stopped"))
    parts = [f"{ICONS['failed']} **Failed**{where}: {ran}{more}", "", error]
    if notes(result):
        parts += ["", notes(result)]
    hint = next_step(job, state, result)
    if hint:
        parts += ["", f"**What you can do:** {hint}"]
    log = next((str(result[k]) for k in LOG_KEYS if result.get(k)), "")
    log = log or (failed.output if failed else "")
    if log.strip():
        parts += ["", details(f"output of {failed.name if failed else 'the job'}", log)]
    parts += ["", folded]
    return "\n".join(parts)


def notes(result: Mapping[str, Any]) -> str:
    """What the job noticed on the way (e.g. hosts setup could not reach), as a list. A note
    can hold what the PR head's code asked for (a host name): each is one line of escaped,
    defanged text whose backticks are literal, so it mentions nobody and opens no code."""
    return "\n".join(f"- {_note(str(n))}" for n in result.get("notes") or [])


def _note(text: str) -> str:
    return plain(text).replace("`", "\\`")


def result_summary(result: Mapping[str, Any]) -> str:
    """One line about what a job produced, where its result says."""
    if result.get("already"):  # a review job's result then has no `comments`
        return "This head was reviewed already; see the review."
    if "comments" in result:
        n, s = int(result.get("comments") or 0), int(result.get("suggestions") or 0)
        return f"Review with {n} comment{'s' * (n != 1)} ({s} with a suggested fix)."
    if result.get("outcome"):
        said = f"Outcome: `{result['outcome']}`."
        if result.get("followup"):  # review follow-ups: what became of each suggestion
            said += f"\n\n{result['followup']}"
        return said
    return ""


def conclusion(state: str, result: Mapping[str, Any]) -> str:
    """The check run's conclusion for a finished job."""
    if state == JobState.SUCCEEDED:
        wanted = str(result.get("conclusion") or "success")
        return wanted if wanted in CONCLUSIONS else "success"
    if state == JobState.FAILED and result.get("outcome") in set(Overdue):
        return "timed_out"  # the watchdog gave up on it (tasks.runner.overdue)
    conclusions: dict[str, str] = {
        JobState.CANCELLED: "cancelled",
        JobState.WAITING_FOR_AUTHORIZATION: "action_required",
    }
    return conclusions.get(state, "failure")


def check_output(job: Job, steps: Sequence[StepRecord], title: str, summary: str) -> dict[str, str]:
    """A check run's `output`: title, the status text as summary, each step's output tail."""
    blocks = [
        details(f"{s.name} ({s.state})", s.output or s.error or "")
        for s in steps
        if s.output or s.error
    ]
    kept: list[str] = []  # whole blocks, the last ones: a fence cut in two lets the log out
    for block in reversed(blocks):
        if sum(len(k) + 2 for k in kept) + len(block) > LIMIT:
            break
        kept.insert(0, block)
    return {"title": title[:200], "summary": summary[:LIMIT], "text": "\n\n".join(kept)}
