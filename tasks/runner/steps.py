"""A job's step records: what ran, how long, its output tail; kept as JSON in `jobs.steps`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class StepKind(StrEnum):
    DETERMINISTIC = "deterministic"
    AGENT = "agent"  # a bounded run of the coding agent


class StepState(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass
class StepRecord:
    """One step of a job. `error` is set when it failed, `duration` (seconds) once it ended;
    `started` (seconds since the epoch) is when it began: the job page's bar and the step's
    span (app.core.tracing) both start there and last `duration`."""

    name: str
    kind: StepKind = StepKind.DETERMINISTIC
    state: StepState = StepState.RUNNING
    output: str = ""
    error: str | None = None
    duration: float | None = None
    started: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The stored shape: `error` and `duration` only once there is one."""
        data: dict[str, Any] = {
            "name": self.name,
            "kind": str(self.kind),
            "state": str(self.state),
            "output": self.output,
        }
        if self.error is not None:
            data["error"] = self.error
        if self.duration is not None:
            data["duration"] = self.duration
        if self.started is not None:
            data["started"] = self.started
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepRecord:
        """A stored step; keys it lacks take their defaults (older rows have fewer)."""
        duration, started = data.get("duration"), data.get("started")
        error = data.get("error")
        return cls(
            name=str(data.get("name") or ""),
            kind=StepKind(data.get("kind") or StepKind.DETERMINISTIC),
            state=StepState(data.get("state") or StepState.RUNNING),
            output=str(data.get("output") or ""),
            error=str(error) if error is not None else None,
            duration=float(duration) if isinstance(duration, int | float) else None,
            started=float(started) if isinstance(started, int | float) else None,
        )


def read_steps(stored: Iterable[Mapping[str, Any]] | None) -> list[StepRecord]:
    """A job row's `steps` column as records."""
    return [StepRecord.from_json(step) for step in stored or []]
