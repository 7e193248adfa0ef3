"""`/agent status` quotes each job's error, which can hold text onloop did not write (the
agent's summary, a branch or file name, a repository's config): it stays one escaped line
that mentions nobody and opens no code or HTML."""

from __future__ import annotations

from app.policy.repo_config import RepoConfig
from app.store.models import Job, JobState
from tasks.blueprints.replies import help_text, status_text
from tasks.runner.repo_settings import LoadedConfig
from tests.doubles.markdown import code_blocks, code_spans, outside_code

ERROR = "agent: done @mallory\n```\n@octo-org/admins see #1\n<img src=x>\n````\nrest"


def test_a_jobs_error_in_status_mentions_nobody() -> None:
    job = Job(
        id=9,
        kind="fix_ci",
        repo="o/r",
        number=1,
        requested_by="alice",
        state=JobState.FAILED,
        steps=[],
        result={"error": ERROR},
    )
    text = status_text([job], {})
    shown = outside_code(text)
    assert not code_blocks(text), text
    for said in ("@mallory", "@octo", "#1"):
        assert said not in shown, (said, text)
    assert "<img" not in text and "rest" in shown  # the whole (short) error, on one line
    assert "@alice" in shown  # the job's requester is named on purpose


def test_an_unknown_verb_is_quoted_as_code() -> None:
    verb = "x`@mallory`y"
    text = help_text(LoadedConfig(RepoConfig()), {"unknown_verb": verb})
    assert f"/agent {verb}" in code_spans(text) and "@mallory" not in outside_code(text)
