"""A job's sandbox as its blueprint sees it: the workplace's pieces, cancel, audit and output."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING

from app.policy.budgets import add_usage
from app.policy.egress import narrow_egress
from app.policy.repo_config import UntrustedEgress
from app.store import audit
from tasks.blueprints import refusals
from tasks.blueprints.heads import setup_failed
from tasks.runner.context import Cancelled, JobFailed
from tasks.runner.output import OutputLog
from tasks.sandbox.base import ExecResult, Sandbox, SandboxError
from tasks.sandbox.egress.policy import refusal_message
from tasks.sandbox.job import JobSandbox, SetupFailed, job_sandbox
from tasks.sandbox.trust import HeadTrust

if TYPE_CHECKING:
    from tasks.blueprints.common import Work


@contextlib.contextmanager
def work_sandbox(
    work: Work,
    rev: str,
    *,
    trust: HeadTrust,
    branch: str | None = None,
    refs: Sequence[str] = (),
    also: Sequence[str] = (),
    clone_url: str | None = None,
    setup: bool = True,
) -> Iterator[JobSandbox]:
    """A started sandbox with `rev` checked out (and the repo's setup done, unless `setup`
    is False: then nothing of the repository's runs in it); removed after. `also`: further
    commits the job needs in the mirror, such as a rebase's base tip.
    An untrusted head's setup gets no network unless the organisation file says
    `sandbox.untrusted_egress: public` (and then no credentials, private index or cache),
    leaves no snapshot, and its output stays on the job's record, off public comments."""
    work.mirror.wait()
    place, name, conf = work.place, work.repo.full_name, work.config.sandbox
    started = time.monotonic()
    gateway, egress = place.gateway, conf.egress
    if egress is None:  # unset: the default registries (pypi, npm)
        egress = narrow_egress(None, None)[0]
    untrusted = trust is not HeadTrust.TRUSTED
    if untrusted and conf.untrusted_egress is not UntrustedEgress.PUBLIC:
        gateway = None
    scope = f"installation-{work.ctx.job.installation_id}"
    boxes: list[Sandbox] = []  # setup's, then the job's: /agent cancel stops them now

    def stop_all() -> None:
        for box in boxes:
            box.stop()

    def on_start(box: Sandbox) -> None:
        boxes.append(box)
        if work.ctx.cancel.is_set():  # cancelled while the workspace was checked out
            box.stop()

    try:
        with (
            work.ctx.cancel_watch(stop_all),
            job_sandbox(
                place.backend,
                place.cache,
                job_id=work.ctx.job.id,
                repo=name,
                clone_url=clone_url or work.repo.clone_url,
                rev=rev,
                image=work.ctx.org_config.sandbox_image(
                    work.ctx.settings, work.config.sandbox.image
                ),
                workspace_root=place.workspaces,
                limits=place.limits(work.config.sandbox.timeout),
                token=work.install_token,
                refs=refs,
                also=also,
                branch=branch,
                setup=work.config.sandbox.setup if setup else None,
                snapshots=place.snapshots,
                pool=place.pool,
                gateway=gateway,
                egress=gateway.policy(egress, scope, private=conf.private_indexes, trust=trust)
                if gateway is not None
                else None,
                on_start=on_start,
                trust=trust,
                scope=scope,
                teardown=work.ctx.teardown,
            ) as js,
        ):
            boxes.append(js.sandbox)
            js.sandbox.observers.append(partial(_audit_command, work))
            output = OutputLog(
                work.ctx.db,
                work.ctx.events,
                work.ctx.job.id,
                work.ctx.settings.job_log_max_bytes,
                step=lambda: work.ctx.current_step,
            )
            js.sandbox.starting.append(output.command)
            js.sandbox.streams.append(output.add)
            js.sandbox.observers.append(lambda _argv, result: output.ended(result.exit_code))
            proposed = False
            if js.setup is not None and gateway is not None and not untrusted:
                proposed = refusals.record(work.ctx, work.loaded.text, js.refused)
            if js.refused and not untrusted:  # an untrusted head names the hosts
                advice = refusals.ADVICE if proposed else ""
                work.ctx.notes.append(refusal_message(js.refused, advice))
            work.ctx.meter.observe("sandbox_start_seconds", time.monotonic() - started)
            try:
                yield js
            finally:  # the sandbox's time, for the daily `sandbox_minutes` budget
                spent = time.monotonic() - started
                add_usage(work.ctx.db, work.ctx.job.id, sandbox_seconds=spent)
    except SetupFailed as exc:
        if work.ctx.cancel.is_set():
            raise Cancelled() from None
        if gateway is not None and not untrusted:
            if refusals.record(work.ctx, work.loaded.text, exc.refused):
                exc.advice = refusals.ADVICE
        raise setup_failed(exc, trust) from None
    except (SandboxError, JobFailed):
        if work.ctx.cancel.is_set():  # its sandbox was stopped under it: a cancel
            raise Cancelled() from None
        raise


def _audit_command(work: Work, argv: list[str], result: ExecResult) -> None:
    audit.record_command(
        work.ctx.db,
        repo=work.repo.full_name,
        job_id=work.ctx.job.id,
        argv=argv,
        exit_code=result.exit_code,
    )
