"""The CI-fix count the `max_ci_fix_attempts` rule reads: from the jobs table, since the last
head onloop did not make (governance.ci_fix_attempts), on a real database."""

from __future__ import annotations

from app.policy.governance import ci_fix_attempts
from app.store.db import Database
from app.store.models import Job, JobState

REPO = "octo/widgets"
WORKED = [
    {"name": "policy", "state": "succeeded"},
    {"name": "authorization", "state": "succeeded"},
    {"name": "failures", "state": "succeeded"},
]


def fix(
    db: Database,
    started: str,
    made: str | None = None,
    *,
    number: int | None = 1,
    automatic: bool = True,
    steps: list[dict[str, str]] | None = None,
) -> int:
    """A fix_ci job that started from head `started` and, when `made`, pushed that head."""
    params = {"kind": "fix_ci", "repo": REPO, "head_sha": started, "params": {}}
    if automatic:
        params["params"] = {"automatic": True}
    with db.transaction() as s:
        job = Job(
            kind="fix_ci",
            repo=REPO,
            number=number,
            head_sha=made or started,
            requested_by="alice",
            state=JobState.SUCCEEDED,
            params=params,
            steps=WORKED if steps is None else steps,
        )
        s.add(job)
        s.flush()
        return job.id


def test_fixes_pushed_in_a_row_count_back_to_the_persons_head(db: Database) -> None:
    assert ci_fix_attempts(db, REPO, 1, "p1") == 0
    fix(db, "p1", "f1")
    assert ci_fix_attempts(db, REPO, 1, "f1") == 1
    fix(db, "f1", "f2")
    assert ci_fix_attempts(db, REPO, 1, "f2") == 2
    assert ci_fix_attempts(db, REPO, 2, "f2") == 0  # another pull request's count


def test_a_persons_push_starts_the_count_again(db: Database) -> None:
    fix(db, "p1", "f1")
    fix(db, "f1", "f2")
    assert ci_fix_attempts(db, REPO, 1, "p2") == 0  # a head no fix made
    fix(db, "p2", "f3")
    assert ci_fix_attempts(db, REPO, 1, "f3") == 1


def test_a_fix_that_pushed_nothing_is_an_attempt_too(db: Database) -> None:
    fix(db, "p1")  # unvalidated: the head did not move
    assert ci_fix_attempts(db, REPO, 1, "p1") == 1
    fix(db, "p1", "f1")
    assert ci_fix_attempts(db, REPO, 1, "f1") == 2


def test_refused_waiting_and_asked_for_fixes_are_not_attempts(db: Database) -> None:
    fix(db, "p1", steps=[{"name": "policy", "state": "failed"}])  # refused by the policy
    fix(db, "p1", steps=[{"name": "policy", "state": "succeeded"}])  # waits for the person
    fix(db, "p1", steps=[])  # stale: ended before its policy step
    fix(db, "p1", automatic=False)  # `/agent fix`: a person asked
    assert ci_fix_attempts(db, REPO, 1, "p1") == 0


def test_the_job_itself_is_not_counted(db: Database) -> None:
    mine = fix(db, "p1")  # a job run again after its worker died
    assert ci_fix_attempts(db, REPO, 1, "p1", job_id=mine) == 0
    assert ci_fix_attempts(db, REPO, 1, "p1") == 1


def test_a_trailer_a_person_wrote_counts_nothing(db: Database) -> None:
    """Only heads onloop's own fix jobs pushed link the chain; commit messages are not read,
    so a person's commit that says `Onloop-Job: 1` is a person's head like any other."""
    fix(db, "p1", "f1")
    assert ci_fix_attempts(db, REPO, 1, "forged-on-top-of-f1") == 0


def test_a_cycle_of_heads_ends(db: Database) -> None:
    fix(db, "a", "b")
    fix(db, "b", "a")  # a person force-pushed back to a head a fix had started from
    assert ci_fix_attempts(db, REPO, 1, "a") == 2
