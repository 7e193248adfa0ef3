"""The failed CI jobs behind a fix_ci job, and their logs, from the GitHub Actions API."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import requests
from github import GithubException
from github.Repository import Repository

log = logging.getLogger(__name__)
LOG_BYTES = 2_000_000  # the tail of a job log that is kept
FAILED = ("failure", "timed_out")


@dataclass(frozen=True)
class FailedJob:
    """One failed CI job: its name, link, and the tail of its log ("" when unavailable)."""

    id: int
    name: str
    html_url: str
    log: str


def _get(repo: Repository, path: str, **params: str) -> dict[str, Any]:
    _, data = repo.requester.requestJsonAndCheck("GET", f"{repo.url}{path}", parameters=params)
    return data


def _actions_jobs(repo: Repository, run_ids: list[int]) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = []
    for run_id in run_ids:
        jobs += _get(repo, f"/actions/runs/{run_id}/jobs").get("jobs") or []
    return jobs


def failed_job_records(
    repo: Repository, params: Mapping[str, Any], head_sha: str
) -> list[dict[str, Any]]:
    """The failed jobs for this trigger: a workflow run's jobs, a check suite's check runs
    (an Actions job is a check run with the same id), or for `/agent fix` every failed run
    on the head commit."""
    run_id, kind = params.get("run_id"), params.get("run_kind")
    if kind == "check_suite" and run_id:
        data = _get(repo, f"/check-suites/{int(run_id)}/check-runs")
        records = data.get("check_runs") or []
    elif kind == "workflow_run" and run_id:
        records = _actions_jobs(repo, [int(run_id)])
    else:
        runs = _get(repo, "/actions/runs", head_sha=head_sha).get("workflow_runs") or []
        records = _actions_jobs(repo, [int(r["id"]) for r in runs if r.get("conclusion") in FAILED])
    return [r for r in records if r.get("conclusion") in FAILED]


def job_log(
    repo: Repository,
    job_id: int,
    *,
    attempts: int = 6,
    delay: float = 2.0,
    cancel: threading.Event | None = None,
) -> str:
    """A job's log text. GitHub answers the logs request with a redirect to a short-lived
    URL, and with 404 for a while after the job ends
    (https://docs.github.com/en/rest/actions/workflow-jobs#download-job-logs-for-a-workflow-run);
    retried with backoff. The URL is a credential of its own: it is never logged."""
    for attempt in range(attempts):
        try:
            headers, _ = repo.requester.requestBlobAndCheck(
                "GET", f"{repo.url}/actions/jobs/{job_id}/logs"
            )
        except GithubException as exc:
            if exc.status not in (404, 410) or attempt == attempts - 1:
                return ""
            if cancel is not None and cancel.wait(delay * 2**attempt):
                return ""
            if cancel is None:
                time.sleep(delay * 2**attempt)
            continue
        location = headers.get("location")
        if not location:
            return ""
        return _download(location)
    return ""


def _download(location: str) -> str:
    """The log's tail. Errors name no URL: the URL's signature is a credential, and a
    requests error's text would carry it into the job's steps and the logs."""
    try:
        with requests.get(location, timeout=60, stream=True) as response:
            if response.status_code != 200:
                return ""
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_content(1 << 16):
                chunks.append(chunk)
                size += len(chunk)
                while size - len(chunks[0]) > LOG_BYTES:
                    size -= len(chunks.pop(0))
    except requests.RequestException as exc:
        log.warning("could not download a CI job log (%s)", type(exc).__name__)
        return ""
    return b"".join(chunks)[-LOG_BYTES:].decode("utf-8", "replace")


def failed_jobs(
    repo: Repository,
    params: Mapping[str, Any],
    head_sha: str,
    *,
    cancel: threading.Event | None = None,
    delay: float = 2.0,
) -> list[FailedJob]:
    """The failed jobs of this trigger with their logs (at most five jobs)."""
    out: list[FailedJob] = []
    for record in failed_job_records(repo, params, head_sha)[:5]:
        job_id = int(record["id"])
        app = (record.get("app") or {}).get("slug", "github-actions")
        log = job_log(repo, job_id, cancel=cancel, delay=delay) if app == "github-actions" else ""
        if not log:
            output = record.get("output") or {}
            log = "\n".join(str(output.get(k) or "") for k in ("title", "summary", "text"))
        out.append(FailedJob(job_id, str(record.get("name")), str(record.get("html_url")), log))
    return out
