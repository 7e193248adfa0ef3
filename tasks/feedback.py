"""What a person sees of a job while it runs: its status comment and its check run."""

from __future__ import annotations

from tasks.context import JobContext, JobListener


def listeners_for(ctx: JobContext) -> list[JobListener]:
    """The listeners that follow `ctx`'s job (none yet)."""
    return []
