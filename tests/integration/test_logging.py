"""One logging pipeline: stdlib and structlog lines alike (JSON or console), each carrying the
job or delivery it belongs to, whole under concurrency, and with no token in any line."""

from __future__ import annotations

import contextvars
import io
import json
import logging
import re
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import structlog

from app.cli.server import OnloopServer
from app.core.logs import NOISY, OnloopHandler, configure_logging, get_logger
from app.core.settings import Settings
from app.github import clients as gh
from app.store.db import Database
from app.store.models import Job, JobState
from tasks.runner.context import JobContext
from tests.doubles.github import GitHubDouble
from tests.doubles.github.settings import settings_for
from tests.doubles.jobs import long_step, quiet_runner
from tests.doubles.webhooks import deliver, load_fixture

REPO = "octo/logged"
JOB_FIELDS = ("job_id", "repo", "kind")


class Captured(io.StringIO):
    """What onloop's handler wrote, a line at a time."""

    def records(self) -> list[dict[str, Any]]:
        """Every line, parsed: a line that is not one JSON object fails here."""
        return [json.loads(line) for line in self.getvalue().splitlines()]

    def take(self) -> list[dict[str, Any]]:
        """The records written since the last take."""
        records = self.records()[getattr(self, "_taken", 0) :]
        self._taken = getattr(self, "_taken", 0) + len(records)
        return records


@contextmanager
def captured(json_lines: bool = True, level: str = "INFO") -> Iterator[Captured]:
    """configure_logging writing to a buffer; afterwards the process's logging as before."""
    root = logging.getLogger()
    levels = {name: logging.getLogger(name).level for name in ("", *NOISY)}
    stream = Captured()
    handler = configure_logging(level, json=json_lines, stream=stream)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        for name, old in levels.items():
            logging.getLogger(name).setLevel(old)
        logging.captureWarnings(False)
        structlog.reset_defaults()


def _queued(db: Database) -> int:
    with db.transaction() as s:
        job = Job(kind="rebase_pr", repo=REPO, installation_id=7, requested_by="a")
        s.add(job)
        s.flush()
        return job.id


def test_every_line_of_a_job_carries_the_job(settings: Settings, db: Database) -> None:
    stdlib = logging.getLogger("onloop.test.runner")
    structured = get_logger("onloop.test.runner")

    def runner(ctx: JobContext) -> dict[str, object]:
        stdlib.info("from the stdlib, job %s", ctx.job.id)
        structured.info("test.structlog_line", step="one")
        helper = threading.Thread(
            target=contextvars.copy_context().run,
            args=(stdlib.warning, "from a thread the job started"),
        )
        helper.start()
        helper.join()
        try:
            raise ValueError("a handled error")
        except ValueError:
            stdlib.exception("with a traceback")
        return {"ok": True}

    job_id = _queued(db)
    jobs = quiet_runner(settings, db, {"rebase_pr": runner})
    with captured() as out:
        assert jobs.run(job_id) == JobState.SUCCEEDED
        during = out.take()
        stdlib.info("after the job")
        structured.info("test.after_the_job")
        after = out.take()

    events = [r["event"] for r in during]
    assert f"from the stdlib, job {job_id}" in events
    assert "test.structlog_line" in events and "from a thread the job started" in events
    assert "job.finished" in events
    for record in during:
        assert {k: record.get(k) for k in JOB_FIELDS} == {
            "job_id": job_id,
            "repo": REPO,
            "kind": "rebase_pr",
        }, record
        assert {"level", "logger", "timestamp"} <= record.keys()
    (failed,) = [r for r in during if r["event"] == "with a traceback"]
    assert failed["level"] == "error" and "ValueError: a handled error" in failed["exception"]
    assert [r["event"] for r in after] == ["after the job", "test.after_the_job"]
    assert all(not set(JOB_FIELDS) & r.keys() for r in after)


def test_the_job_s_cancel_watch_logs_with_the_job(settings: Settings, db: Database) -> None:
    """Past its time limit (the deadline Timer's thread), the cancel watch (its own thread)
    stops the sandbox and says so: both started with the job's context."""
    short = settings.model_copy(update={"job_time_limit": 1})
    stopped = threading.Event()
    job_id = _queued(db)
    jobs = quiet_runner(short, db, {"rebase_pr": long_step(stopped, 60)})
    with captured() as out:
        assert jobs.run(job_id) == JobState.FAILED
        records = out.take()
    (watch,) = [r for r in records if "no longer wanted" in r["event"]]
    assert watch["job_id"] == job_id and watch["repo"] == REPO and watch["kind"] == "rebase_pr"
    assert watch["logger"] == "tasks.runner.context"


def test_a_delivery_is_logged_with_its_guid(client: Any) -> None:
    guid = str(uuid.uuid4())
    with captured() as out:
        answer = deliver(client, "ping", load_fixture("ping.with-app_id"), guid=guid)
        records = out.take()
    assert answer.status_code in (200, 204)
    (line,) = [r for r in records if r["event"].startswith("delivery.")]
    assert line["event"] == "delivery.recorded" and line["delivery_guid"] == guid
    assert line["gh_event"] == "ping" and line["logger"] == "onloop.web"
    assert all(r.get("delivery_guid") == guid for r in records)
    with captured() as out:  # unbound once the request is answered
        get_logger("onloop.web").info("test.later")
        assert "delivery_guid" not in out.take()[0]


def test_console_lines_look_the_same_from_stdlib_and_structlog() -> None:
    with captured(json_lines=False) as out:
        with structlog.contextvars.bound_contextvars(job_id=7):
            logging.getLogger("onloop.test.console").info("from the %s", "stdlib")
            get_logger("onloop.test.console").info("from structlog")
        lines = out.getvalue().splitlines()
    shape = re.compile(
        r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z \[info\s*\] (?P<event>.+?)\s+"
        r"\[onloop\.test\.console\] job_id=7$"
    )
    matches = [shape.match(line) for line in lines]
    assert all(matches), lines
    assert [m.group("event") for m in matches if m] == ["from the stdlib", "from structlog"]
    assert "\x1b[" not in out.getvalue()  # no colours where the stream is not a terminal


def test_configure_logging_again_replaces_its_handler() -> None:
    with captured() as first:
        with captured() as second:
            ours = [h for h in logging.getLogger().handlers if isinstance(h, OnloopHandler)]
            assert len(ours) == 1
            logging.getLogger("onloop.test").warning("once")
            assert len(second.take()) == 1 and first.take() == []


def test_lines_from_many_threads_stay_whole() -> None:
    threads, lines = 8, 200
    stdlib = logging.getLogger("onloop.test.threads")
    structured = get_logger("onloop.test.threads")
    padding = "x" * 500  # long lines: more room for two writes to interleave

    def chatter(thread: int) -> None:
        for n in range(lines):
            if n % 2:
                stdlib.info("stdlib %d %d %s", thread, n, padding)
            else:
                structured.info("test.structlog", thread=thread, n=n, padding=padding)

    with captured() as out:
        workers = [threading.Thread(target=chatter, args=(t,)) for t in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        records = out.records()  # each line parses: no two records glued or split
    assert len(records) == threads * lines
    seen = {
        (r["thread"], r["n"]) if "thread" in r else tuple(map(int, r["event"].split()[1:3]))
        for r in records
    }
    assert seen == {(t, n) for t in range(threads) for n in range(lines)}


def test_tokens_are_redacted_even_from_pygithub_debug_lines(
    github_double: GitHubDouble, tmp_path: Path
) -> None:
    """PyGithub logs response bodies at DEBUG, an installation token's included: even with its
    loggers lowered below the INFO floor, no line carries a token or a JWT."""
    github_double.create_repo("octo/hello", files={"README.md": "hi\n"})
    settings = settings_for(github_double, tmp_path)
    installation = next(i.id for i in github_double.installations.values() if i.account == "octo")
    with captured(level="DEBUG") as out:
        assert logging.getLogger("github").level == logging.INFO  # the floor
        logging.getLogger("github").setLevel(logging.DEBUG)
        github = gh.GitHubApp.for_settings(settings)
        token = github.installation_token(installation)
        github.installation_client(token).get_repo("octo/hello")
        text = out.getvalue()
        out.records()  # still JSON lines
    assert "access_tokens" in text and "[redacted]" in text
    assert token.secret() not in text
    assert "eyJ" not in text


def test_gunicorn_lines_go_through_the_same_handler(settings: Settings) -> None:
    server = OnloopServer(settings, "127.0.0.1:0")
    with captured() as out:
        glog = server.cfg.logger_class(server.cfg)
        glog.info("Booting worker with pid: %s", 1234)
        glog.access_log.info("%s", "127.0.0.1 GET /readyz 200")
        records = out.take()
    assert [(r["logger"], r["event"]) for r in records] == [
        ("gunicorn.error", "Booting worker with pid: 1234"),
        ("gunicorn.access", "127.0.0.1 GET /readyz 200"),
    ]
    assert glog.error_log.handlers == [] and glog.access_log.handlers == []


FAKE = "ghs_" + "A1b2C3d4" * 5  # the shape of an installation token


class _Colours(io.StringIO):
    """A stream that says it is a terminal, so the console renderer colours its values."""

    def isatty(self) -> bool:
        return True


def test_a_token_after_a_newline_or_in_a_traceback_is_redacted() -> None:
    """JSON escapes a newline as `\\n`: a token right after one has a letter in front of it
    in the rendered line, which a word boundary would not see."""
    with captured() as out:
        get_logger("onloop.test").info("event", value=f"line one\n{FAKE}")
        logging.getLogger("onloop.test").warning("body:\n%s", FAKE)
        try:
            raise RuntimeError(f"refused\n{FAKE}")
        except RuntimeError:
            logging.getLogger("onloop.test").exception("failed")
        text = out.getvalue()
        assert len(out.records()) == 3
    assert FAKE not in text and text.count("[redacted]") >= 3


def test_console_lines_redact_tokens_and_print_no_local_variables() -> None:
    stream = _Colours()
    handler = configure_logging("INFO", json=False, stream=stream)
    try:
        api_key = "sk-live-" + uuid.uuid4().hex  # a secret no token pattern knows
        try:
            raise ValueError(f"the agent said no ({api_key[:7]})")
        except ValueError:
            get_logger("onloop.test").exception("agent failed", token_text=FAKE)
        text = stream.getvalue()
    finally:
        logging.getLogger().removeHandler(handler)
    assert "\x1b[" in text  # coloured, as on a terminal
    assert FAKE not in text and "[redacted]" in text
    assert "agent failed" in text and "ValueError" in text
    assert api_key not in text  # no frame's locals in the traceback
