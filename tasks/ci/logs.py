"""The failing step of a GitHub Actions job log and the lines that say why it failed."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from app.core.markdown import fenced, inline_code
from tasks.ci.parsers import PARSERS

# Each line of a job log (GET /repos/{owner}/{repo}/actions/jobs/{job_id}/logs) starts with
# an ISO timestamp; steps are `##[group]Run <command>` ... `##[endgroup]` headers followed by
# the step's output, and a failed step ends with `##[error]Process completed with exit code N.`
# (https://docs.github.com/en/actions/using-workflows/workflow-commands-for-github-actions).
_STAMP = re.compile(r"^\ufeff?\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z ?")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
_EXIT = re.compile(r"^##\[error\]Process completed with exit code \d+")
_POST = ("Post job cleanup.", "Cleaning up orphan processes")
MAX_LINE = 400
TAIL = 10  # lines kept from the end when the picked lines are too many


@dataclass
class LogExcerpt:
    """What failed: the tool recognised (None: unknown, the last lines are given), the
    failing step's command, and the lines that matter."""

    tool: str | None
    failing_step: str | None
    lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The lines, joined."""
        return "\n".join(self.lines)

    def markdown(self, job: str | None = None) -> str:
        """A Markdown section for TASK.md / the agent: the step and the lines, fenced."""
        where = f"job {inline_code(job)}" if job else "the job"
        step = f", step {inline_code(self.failing_step)}" if self.failing_step else ""
        tool = f" ({self.tool} output)" if self.tool else " (last lines)"
        return f"Failing in {where}{step}{tool}:\n\n{fenced(self.text, 'text')}\n"


def clean(log_text: str) -> list[str]:
    """The log's lines without timestamps, colour codes or carriage returns."""
    out = []
    # Not splitlines(): a lone CR (a progress bar redrawing itself) does not end a line.
    for raw in log_text.removesuffix("\n").split("\n"):
        line = _ANSI.sub("", _STAMP.sub("", raw, count=1))
        if "\r" in line:  # progress bars redraw with CR: keep what was shown last
            line = line.rstrip("\r").rsplit("\r", 1)[-1]
        out.append(line.rstrip())
    return out


@dataclass
class _Step:
    name: str | None
    output: list[str] = field(default_factory=list)
    failed: bool = False  # ended with "Process completed with exit code N"
    errors: bool = False  # had any ##[error] line


def steps(lines: list[str]) -> list[_Step]:
    """The job's steps in order; the first (name None) is what comes before any `Run`."""
    found = [_Step(None)]
    in_header = False
    for line in lines:
        if line.startswith("##[group]Run "):
            found.append(_Step(line.removeprefix("##[group]Run ").strip()))
            in_header = True
            continue
        step = found[-1]
        if line.startswith("##[endgroup]"):
            in_header = False
            continue
        if in_header or line.startswith(("##[group]", "##[debug]")):
            continue  # the step's script, shell and env; a tool's own group titles
        if line.startswith("##[error]"):
            step.errors = True
            if _EXIT.match(line):
                step.failed = True
                found.append(_Step("(post job)"))  # what follows is clean-up, not the step
                continue
            line = "[error] " + line.removeprefix("##[error]")
        if line.startswith(_POST):
            found.append(_Step("(post job)"))
            continue
        step.output.append(line.removeprefix("##[command]").removeprefix("##[warning]"))
    return found


def failing_step(lines: list[str]) -> tuple[str | None, list[str]]:
    """The failing step's command and its output; for a log with no Actions markers, the
    whole text (so this also works on a plain command's output)."""
    found = steps(lines)
    for wanted in (lambda s: s.failed, lambda s: s.errors):
        for step in found:
            if wanted(step):
                return step.name, step.output
    if len(found) > 1:  # no error marker: the last step is the best guess
        return found[-1].name, found[-1].output
    return None, found[0].output


def _clip(lines: list[str], max_lines: int) -> list[str]:
    lines = [line if len(line) <= MAX_LINE else line[: MAX_LINE - 1] + "…" for line in lines]
    if len(lines) <= max_lines:
        return lines
    tail = min(TAIL, max_lines // 4)
    head = max_lines - tail - 1
    left_out = len(lines) - head - tail
    return [*lines[:head], f"[… {left_out} lines left out …]", *lines[len(lines) - tail :]]


def excerpt(log_text: str, max_lines: int = 80) -> LogExcerpt:
    """The failing step of a job log and its telling lines: what pytest, ruff, mypy, eslint,
    tsc, go test or cargo said, else the step's last `max_lines` lines."""
    name, output = failing_step(clean(log_text))
    keep: set[int] = set()
    tools: list[tuple[int, str]] = []
    for tool, parse in PARSERS.items():
        picked = parse(output)
        if picked:
            keep.update(picked)
            tools.append((min(picked), tool))
    if keep:
        tool = "+".join(t for _, t in sorted(tools))
        return LogExcerpt(tool, name, _clip([output[i] for i in sorted(keep)], max_lines))
    while output and not output[-1].strip():
        output.pop()
    return LogExcerpt(None, name, _clip(output[-max_lines:], max_lines))


__all__ = ["LogExcerpt", "clean", "excerpt", "failing_step"]
