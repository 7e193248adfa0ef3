"""Untrusted output quoted in onloop's comments stays quoted: it cannot close its fence,
leave its code span, inject HTML into a summary, or mention anyone."""

from __future__ import annotations

from app.core.markdown import ZWSP, defang, fenced, inline_code, plain
from app.github.comments import details
from app.store.models import Job, JobState
from tasks.ci.logs import LogExcerpt
from tasks.feedback.progress import LIMIT, check_output, final_text
from tasks.review.diff import suggestion_block, suggestions_in
from tasks.runner.steps import StepRecord, StepState
from tests.doubles.markdown import code_blocks, code_spans, outside_code

ESCAPE = "ok\n```\n@octo-org/admins please see #1 <img src=x>\n````\n~~~\nmore"


def test_a_log_cannot_close_its_fence_or_mention_anyone() -> None:
    text = details("output of setup", ESCAPE)
    assert code_blocks(text) == [ESCAPE + "\n"]
    assert "@octo" not in outside_code(text) and "#1" not in outside_code(text)


def test_a_summary_is_text_escaped_and_mentions_nobody() -> None:
    text = details("`x` </summary><img src=x> @alice #12", "log")
    assert "<img" not in text and "</summary><img" not in text
    assert "@alice" not in outside_code(text) and "#12" not in outside_code(text)
    assert plain("a\n@b") == f"a @{ZWSP}b"


def test_fenced_keeps_an_info_string_without_backticks() -> None:
    assert fenced("x", "di`ff x") == "```diffx\nx\n```"
    assert code_blocks(fenced("a ```` b", "sh")) == ["a ```` b\n"]


def test_a_code_span_holds_any_backticks() -> None:
    for name in ["lib `@mallory` x.py", "`a", "b`", "a``b`c", " spaced ", "two\nlines"]:
        (span,) = code_spans(f"- {inline_code(name)}")
        assert span == " ".join(name.splitlines())
        assert "@mallory" not in outside_code(f"- {inline_code(name)}")


def test_defang_leaves_code_blocks_and_suggestions_as_they_are() -> None:
    suggestion = suggestion_block(["@property", "def x(self): return '```'"])
    text = f"Ping @alice about #3.\n\n{suggestion}\n\n> @bob\n\n    @indented"
    out = defang(text)
    assert suggestions_in(out) == [["@property", "def x(self): return '```'"]]
    assert "@alice" not in outside_code(out) and "@bob" not in outside_code(out)
    assert "#3" not in outside_code(out) and "@indented" in out
    assert f"@{ZWSP}alice" in out and defang("a\r\n@b") == f"a\r\n@{ZWSP}b"


def test_a_ci_excerpt_names_its_step_as_code() -> None:
    text = LogExcerpt("pytest", "a` @x `b", ["E ```", "@y"]).markdown()
    assert "@x" not in outside_code(text) and "@y" not in outside_code(text)
    assert code_blocks(text) == ["E ```\n@y\n"]


def job() -> Job:
    return Job(id=7, kind="fix_ci", repo="o/r", number=1, requested_by="alice", params={})


def test_the_status_comment_quotes_the_error_and_folds_its_steps() -> None:
    steps = [StepRecord("setup", state=StepState.FAILED, output=ESCAPE)]
    text = final_text(job(), steps, JobState.FAILED, {"error": "setup said @carol"}, {})
    assert "@carol" not in outside_code(text) and "@octo" not in outside_code(text)
    assert "❌ setup" in outside_code(text)  # the step list is a list, not code
    assert ESCAPE + "\n" in code_blocks(text)


def test_a_check_runs_text_keeps_whole_blocks_when_it_is_cut() -> None:
    steps = [
        StepRecord(f"s{i}", state=StepState.SUCCEEDED, output=("```\n@dave\n" * 400)[:2900])
        for i in range(30)
    ]
    text = check_output(job(), steps, "t", "s")["text"]
    assert len(text) <= LIMIT and "@dave" not in outside_code(text)
