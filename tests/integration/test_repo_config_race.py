"""Concurrent first jobs on a repository all read its `.github/onloop.yml`: none of them fails
on the `repo_configs` row the first of them writes, and the row is the file as read."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from github import Auth, Github
from github.Repository import Repository
from sqlalchemy import func, select

from app.store.db import Database
from app.store.models import RepoConfigCache
from tasks.runner.repo_settings import LoadedConfig, load_repo_config
from tests.doubles.github import GitHubDouble

REPO = "octo/fresh"
JOBS = 16
CONFIG = "sandbox:\n  setup: make\n"


def repository(double: GitHubDouble) -> Repository:
    inst = next(i for i in double.installations.values() if i.account == "octo")
    token = double.issue_installation_token(inst.id).value
    return Github(auth=Auth.Token(token), base_url=double.api_url, retry=0).get_repo(REPO)


def test_first_jobs_on_a_repository_load_its_config_at_once(
    github_double: GitHubDouble, db: Database
) -> None:
    github_double.create_repo(REPO, files={"README.md": "hi\n", ".github/onloop.yml": CONFIG})
    repos = [repository(github_double) for _ in range(JOBS)]  # one client per job, as workers
    start = threading.Barrier(JOBS)

    def first_job(repo: Repository) -> LoadedConfig:
        start.wait()
        return load_repo_config(db, repo)

    with ThreadPoolExecutor(JOBS) as pool:
        loaded = list(pool.map(first_job, repos))  # re-raises the first job that failed

    assert all(found.error is None and found.config.sandbox.setup == "make" for found in loaded)
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(RepoConfigCache)) == 1
        row = s.get(RepoConfigCache, REPO)
        assert row is not None and row.text == CONFIG and row.sha


def test_a_changed_file_replaces_the_cached_row(github_double: GitHubDouble, db: Database) -> None:
    github_double.create_repo(REPO, files={"README.md": "hi\n", ".github/onloop.yml": CONFIG})
    repo = repository(github_double)
    load_repo_config(db, repo)
    github_double.commit(REPO, repo.default_branch, {".github/onloop.yml": "bogus: 1\n"})
    assert load_repo_config(db, repository(github_double)).unknown == ["bogus"]
    with db.read() as s:
        row = s.get(RepoConfigCache, REPO)
        assert row is not None and row.text == "bogus: 1\n"
