"""The arithmetic of /insights: nearest-rank percentiles, fix_ci rounds per fixed failure,
and the chart's bars scaled to the largest kind."""

from __future__ import annotations

from datetime import UTC, datetime

from app.store.insights import JobRow, ci_fixes, percentile
from app.web.pages.charts import LABEL, jobs_by_kind

AT = datetime(2026, 12, 4, tzinfo=UTC)


def row(n: int, state: str, number: int = 1, kind: str = "fix_ci") -> JobRow:
    return JobRow(n, "acme/w", kind, state, number, AT, None, None, 0, 0.0, 0.0)


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 21)]  # 1 .. 20
    assert percentile(values, 50) == 10.0
    assert percentile(values, 95) == 19.0
    assert percentile([7.0], 95) == 7.0
    assert percentile([], 50) is None


def test_rounds_run_until_a_success_per_pull_request() -> None:
    jobs = [
        row(1, "failed"),
        row(2, "failed", number=2),
        row(3, "cancelled"),  # replaced by a newer head: not a round
        row(4, "failed"),
        row(5, "succeeded"),  # PR 1: three rounds for one fixed failure
        row(6, "succeeded", number=2),  # PR 2: two
        row(7, "failed"),  # PR 1 fails again, not fixed yet
        row(8, "succeeded", kind="fix_issue"),
    ]
    fixes = ci_fixes(jobs)["acme/w"]
    assert (fixes.fixed, fixes.rounds, fixes.unfixed) == (2, 5, 1)
    assert fixes.per_fix == 2.5


def test_bars_scale_to_the_largest_kind_and_stack_outcomes() -> None:
    chart = jobs_by_kind({"fix_ci": {"failed": 1, "succeeded": 1}, "fix_issue": {"succeeded": 4}})
    first, *rest = chart.segments
    assert first.title == "fix_issue succeeded: 4" and first.x == LABEL
    assert [s.outcome for s in rest] == ["succeeded", "failed"]
    assert rest[0].width == rest[1].width == first.width / 4
    assert rest[1].x == rest[0].x + rest[0].width
