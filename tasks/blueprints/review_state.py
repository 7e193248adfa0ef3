"""The state of one review_pr job, and what it posted (tasks/blueprints/review.py runs it)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from github.PullRequest import PullRequest
from github.PullRequestReview import PullRequestReview

from app.github.comments import marker
from tasks.blueprints.common import Work
from tasks.blueprints.pulls import PullRef
from tasks.review.diff import ChangedLines
from tasks.review.findings import Detected, Finding, ToolRun
from tasks.review.suggest import Built, Edit, ReviewComment
from tasks.runner.context import Cancelled, JobContext
from tasks.sandbox.base import ExecResult, Sandbox, SandboxError


class ReviewEvent(StrEnum):
    """The review events onloop posts (it never approves: tests/e2e/test_never_merges.py)."""

    COMMENT = "COMMENT"
    REQUEST_CHANGES = "REQUEST_CHANGES"


@dataclass(frozen=True)
class Posted:
    """The review onloop posted, or the one it found already posted on this head."""

    review_id: int
    review_url: str
    already: bool = False
    event: ReviewEvent | None = None
    comments: int = 0
    suggestions: int = 0
    findings: int = 0
    left_out: int = 0  # findings and fixes on lines the pull request did not change

    def to_json(self) -> dict[str, Any]:
        """Its part of the job's result (tasks.feedback.progress reads it)."""
        found: dict[str, Any] = {"review_id": self.review_id, "review_url": self.review_url}
        if self.already:
            return {**found, "already": True}
        return {
            **found,
            "event": self.event,
            "comments": self.comments,
            "suggestions": self.suggestions,
            "findings": self.findings,
            "left_out": self.left_out,
        }


@dataclass
class Review:
    work: Work
    pr: PullRequest
    pull: PullRef
    base_sha: str
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    box: Sandbox | None = None
    diff: str = ""
    changed: ChangedLines = field(default_factory=ChangedLines)
    existing: PullRequestReview | None = None
    detected: Detected = field(default_factory=Detected)
    chosen: dict[str, list[str]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    runs: list[ToolRun] = field(default_factory=list)
    fixer_runs: list[ToolRun] = field(default_factory=list)
    edits: list[Edit] = field(default_factory=list)
    agent_comments: list[ReviewComment] = field(default_factory=list)
    agent_note: str = ""
    built: Built = field(default_factory=Built)
    posted: Posted | None = None

    @property
    def ctx(self) -> JobContext:
        return self.work.ctx

    @property
    def head_sha(self) -> str:
        return self.pull.head_sha

    @property
    def tag(self) -> str:
        """The hidden marker of onloop's review of this head."""
        return marker(f"review:{self.head_sha}")

    def exec(self, cmd: Sequence[str] | str) -> ExecResult:
        """A command in the sandbox; Cancelled when the job was cancelled meanwhile (the
        cancel watch stops the sandbox, which ends the command)."""
        assert self.box is not None
        try:
            done = self.box.exec(cmd)
        except SandboxError:
            if self.ctx.cancel.is_set():
                raise Cancelled() from None
            raise
        if self.ctx.cancel.is_set():
            raise Cancelled()
        return done
