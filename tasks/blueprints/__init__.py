"""Blueprints: a job as a short declared sequence of deterministic and bounded agent steps."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from tasks.runner.context import JobContext
from tasks.runner.steps import StepKind

S = TypeVar("S")


@dataclass(frozen=True)
class Step(Generic[S]):
    """One step; `run` returns the text to keep as the step's output tail (or None)."""

    name: str
    run: Callable[[S], str | None]
    kind: StepKind = StepKind.DETERMINISTIC


def run_steps(ctx: JobContext, steps: Sequence[Step[S]], state: S) -> None:
    """Run the steps in order, each recorded on the job; stops at the first exception."""
    for step in steps:
        with ctx.step(step.name, step.kind) as record:
            output = step.run(state)
            if output:
                record.output = output
