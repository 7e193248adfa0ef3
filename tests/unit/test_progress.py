"""The status comment's last word: what the job noticed on the way (its notes), its steps."""

from __future__ import annotations

from app.store.models import Job, JobState
from tasks.feedback.progress import check_output, final_text, step_lines, work_started
from tasks.runner.steps import StepKind, StepRecord, StepState, read_steps
from tasks.sandbox.egress.policy import Refusal, refusal_message
from tests.doubles.markdown import code_blocks, code_spans, outside_code

NOTE = "setup tried to reach evil.example; allow it in .github/onloop.yml under sandbox.egress"


def job() -> Job:
    return Job(id=7, kind="fix_ci", repo="o/r", number=1, requested_by="alice", params={})


def test_notes_are_said_on_success_and_on_failure() -> None:
    steps = [StepRecord("setup", state=StepState.SUCCEEDED, duration=1.0)]
    done = final_text(job(), steps, JobState.SUCCEEDED, {"notes": [NOTE]}, {})
    failed = final_text(job(), steps, JobState.FAILED, {"error": "x", "notes": [NOTE]}, {})
    assert f"- {NOTE}" in done and f"- {NOTE}" in failed
    assert NOTE not in final_text(job(), steps, JobState.SUCCEEDED, {}, {})


def test_a_failed_step_is_named_with_its_output() -> None:
    steps = [
        StepRecord("policy", state=StepState.SUCCEEDED, duration=0.2),
        StepRecord("lint", state=StepState.FAILED, output="E501 line too long", error="boom"),
    ]
    text = final_text(job(), steps, JobState.FAILED, {"error": "lint failed"}, {})
    assert "at step **lint**" in text and "E501 line too long" in text
    assert "2 steps · 0.2 s" in text
    assert "lint (failed)" in check_output(job(), steps, "t", "s")["text"]


def test_work_starts_after_authorization_succeeds() -> None:
    policy = StepRecord("policy", state=StepState.SUCCEEDED)
    waiting = StepRecord("authorization")
    assert not work_started([policy, waiting])
    assert work_started([policy, StepRecord("authorization", state=StepState.SUCCEEDED)])
    assert step_lines([policy], ["policy", "authorization"]) == ["- ✅ policy", "- ◻️ authorization"]


def test_step_records_keep_the_stored_json_shape() -> None:
    running = {"name": "agent", "kind": "agent", "state": "running", "output": ""}
    failed = {**running, "state": "failed", "error": "the worker stopped", "duration": 2.5}
    assert [s.to_json() for s in read_steps([running, failed])] == [running, failed]
    assert read_steps([failed])[0].kind == StepKind.AGENT
    older = StepRecord.from_json({"name": "sandbox", "state": "running"})  # fewer keys
    assert older == StepRecord("sandbox") and read_steps(None) == []


def test_a_note_with_the_heads_host_names_mentions_nobody_and_opens_no_code() -> None:
    """The hosts in a note are what the PR head's setup asked the proxy for."""
    hosts = ["a`@mallory`b.test", "```\n@octo-org/admins #1 <img src=x>\n", "~~~ @carol"]
    note = refusal_message([Refusal(h, 443) for h in hosts])
    steps = [StepRecord("setup", state=StepState.SUCCEEDED)]
    for state in (JobState.SUCCEEDED, JobState.FAILED):
        text = final_text(job(), steps, state, {"error": "x", "notes": [note]}, {})
        shown = outside_code(text)
        assert not code_blocks(text) and set(code_spans(text)) <= {"/agent fix", "/agent help"}
        for said in ("@mallory", "@octo", "@carol", "#1"):
            assert said not in shown, (said, text)
        assert "<img" not in text  # escaped: shown as text, not HTML
        assert "a`@\u200bmallory`b.test" in shown  # still reads as the host it asked for
