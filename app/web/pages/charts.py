"""Server-side SVG charts: geometry computed here, drawn by the template with classes only
(the Content-Security-Policy allows no inline style, and no script is needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.store.models import JobState

# Stacking order and colour classes (insights.css) of the outcomes; others come after.
OUTCOMES = (
    JobState.SUCCEEDED,
    JobState.FAILED,
    JobState.CANCELLED,
    JobState.RUNNING,
    JobState.QUEUED,
    JobState.WAITING_FOR_AUTHORIZATION,
)
WIDTH, BAR, GAP, LABEL, TOP = 640, 18, 8, 150, 4


@dataclass(frozen=True)
class Segment:
    x: float
    y: float
    width: float
    height: float
    outcome: str
    title: str


@dataclass(frozen=True)
class Label:
    x: float
    y: float
    text: str
    anchor: str  # "start" or "end"


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    segments: Sequence[Segment]
    labels: Sequence[Label]
    title: str


def ordered_outcomes(jobs: Mapping[str, Mapping[str, int]]) -> list[str]:
    """The outcomes present in `jobs`, known ones first in their order."""
    present = {state for states in jobs.values() for state in states}
    known = [str(o) for o in OUTCOMES if o in present]
    return known + sorted(present - set(known))


def jobs_by_kind(jobs: Mapping[str, Mapping[str, int]]) -> Chart:
    """One horizontal bar per kind, its outcomes stacked, scaled to the largest kind."""
    kinds = sorted(jobs, key=lambda k: (-sum(jobs[k].values()), k))
    most = max((sum(jobs[k].values()) for k in kinds), default=0)
    room = WIDTH - LABEL - 50
    segments: list[Segment] = []
    labels: list[Label] = []
    for row, kind in enumerate(kinds):
        y = TOP + row * (BAR + GAP)
        labels.append(Label(LABEL - 6, y + BAR - 4, kind, "end"))
        x = float(LABEL)
        for outcome in ordered_outcomes({kind: jobs[kind]}):
            count = jobs[kind].get(outcome, 0)
            width = room * count / most if most else 0.0
            segments.append(
                Segment(round(x, 1), y, round(width, 1), BAR, outcome, f"{kind} {outcome}: {count}")
            )
            x += width
        labels.append(Label(round(x + 4, 1), y + BAR - 4, str(sum(jobs[kind].values())), "start"))
    height = TOP * 2 + max(1, len(kinds)) * (BAR + GAP)
    title = "Jobs by kind and outcome"
    return Chart(WIDTH, height, segments, labels, title)
