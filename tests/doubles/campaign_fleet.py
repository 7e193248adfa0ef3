"""Many small repositories on the double, a real worker (the local sandbox) and the CLI: what
the campaign e2e test and bench/campaign.py drive a campaign with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from click.testing import CliRunner
from sqlalchemy import func, select

from app.cli.main import main
from app.core.crypto import TokenBox
from app.github.user_tokens import TokenPair, store
from app.store import campaigns
from app.store.db import Database
from app.store.fleet_tables import CampaignRepo, RepoState
from app.store.models import Job
from app.web import create_app
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import SECRET_KEY, settings_for
from tests.doubles.payloads import pull_request_event
from tests.doubles.redis_server import RedisServer
from tests.doubles.webhooks import deliver
from tests.doubles.worker_proc import WorkerProcess, settings_env

OWNER = "alice"


@dataclass(frozen=True)
class Member:
    """One repository of the fleet: its files, the owner's role, its topics."""

    files: Mapping[str, str | bytes]
    role: str = "write"
    topics: tuple[str, ...] = field(default_factory=tuple)


class Fleet:
    """The double with `members` (and `octo/campaigns` for the tracking issue), alice signed
    in, the web app for deliveries and a worker with `concurrency` threads."""

    def __init__(
        self,
        double: GitHubDouble,
        database_url: str,
        root: Path,
        members: Mapping[str, Member],
        concurrency: int = 3,
    ) -> None:
        self.double, self.root = double, root
        self.redis = RedisServer(root).start()
        self.settings = settings_for(
            double,
            root,
            database_url=database_url,
            redis_url=self.redis.url,
            work_dir=root / "work",
            sandbox_backend="local",
            max_jobs_per_installation=20,
        )
        double.create_repo("octo/campaigns", files={"README.md": "campaigns\n"})
        for name, member in members.items():
            repo = double.create_repo(name, files=dict(member.files))
            repo.topics = list(member.topics)
            double.set_permission(name, OWNER, member.role)
        self.db = Database(database_url)
        user = double.user(OWNER)
        token = TokenPair(double.issue_user_token(OWNER), None, None, None)
        store(self.db, TokenBox(SECRET_KEY), user.id, OWNER, token)
        self.client = create_app(self.settings, db=self.db).test_client()
        self.worker = WorkerProcess(self.settings, root / "worker.log", concurrency=concurrency)
        self.worker.start()

    def restart_worker(self, concurrency: int) -> None:
        """The worker again, with `concurrency` threads (1: jobs one by one)."""
        self.worker.stop()
        self.worker = WorkerProcess(
            self.settings, self.root / "worker.log", concurrency=concurrency
        )
        self.worker.start()

    def cli(self, *args: str) -> str:
        """`onloop campaign ARGS` with the fleet's settings; its output (exit 0 asserted)."""
        env = settings_env(self.settings, ONLOOP_GITHUB_PACING="false")
        done = CliRunner().invoke(main, ["campaign", *args], env=env, catch_exceptions=False)
        assert done.exit_code == 0, done.output
        return done.output

    def rows(self, name: str) -> dict[str, CampaignRepo]:
        found = campaigns.by_name(self.db, name)
        assert found is not None
        return {r.repo: r for r in campaigns.repos(self.db, found.id)}

    def settled(self, name: str) -> dict[str, CampaignRepo] | None:
        """The rows once no job is running and no coordinator pass is due or under way."""
        rows = self.rows(name)
        if any(r.state == RepoState.RUNNING for r in rows.values()):
            return None
        campaign = campaigns.by_name(self.db, name)
        assert campaign is not None
        busy = campaign.advance_requested_at is not None or campaign.lease_until is not None
        return None if busy else rows

    def merge(self, repo: str, number: int) -> None:
        """A maintainer merges the PR; GitHub delivers pull_request.closed."""
        self.double.merge_pull(repo, number)
        payload = pull_request_event(self.double, repo, number, "closed", "carol")
        assert deliver(self.client, "pull_request", payload).status_code in (202, 204)

    def job(self, job_id: int) -> Job:
        with self.db.read() as s:
            found = s.get(Job, job_id)
            assert found is not None
            return found

    def jobs(self) -> int:
        with self.db.read() as s:
            return int(s.scalar(select(func.count()).select_from(Job)) or 0)

    def close(self) -> None:
        self.worker.stop()
        self.db.dispose()
        self.redis.stop()
