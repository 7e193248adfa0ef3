"""A repository with `schedules:` on the GitHub double, installed in onloop's database, and
beat's tick run the way the worker runs it (its own GitHub client and ETag cache)."""

from __future__ import annotations

from datetime import datetime

from app.core.crypto import TokenBox
from app.core.settings import Settings
from app.core.telemetry import Telemetry
from app.github.clients import GitHubApp
from app.github.conditional import ETagCache
from app.github.user_tokens import TokenPair, store
from app.github.write_slots import WriteSlots
from app.policy.repo_config import parse_repo_config
from app.store import schedule_approvals
from app.store.db import Database
from app.store.models import Installation
from tasks.queue.schedule_consent import version
from tasks.queue.schedules import Fired, tick
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import SECRET_KEY

REPO = "octo/widgets"


def schedule_file(kind: str, owner: str, cron: str = "0 3 * * *", extra: str = "") -> str:
    return (
        f'{extra}schedules:\n  - name: nightly\n    cron: "{cron}"\n'
        f"    kind: {kind}\n    owner: {owner}\n"
    )


def installed_repo(double: GitHubDouble, db: Database, files: dict[str, str | bytes]) -> int:
    """`octo/widgets` holding `files` (alice: write, bob: read), installed as an installation
    event would have recorded it; its installation id."""
    repo = double.create_repo(REPO, files=files)
    for login, role in (("alice", "write"), ("bob", "read")):
        double.set_permission(REPO, login, role)
    installation = double.installation_for(repo)
    assert installation is not None
    with db.transaction() as s:
        s.add(Installation(id=installation.id, account_login="octo", repositories=[REPO]))
    return installation.id


def sign_in(double: GitHubDouble, db: Database, login: str) -> None:
    """`login` has signed in to onloop: a stored user token the double accepts."""
    user = double.user(login)
    token = double.issue_user_token(login)
    store(db, TokenBox(SECRET_KEY), user.id, user.login, TokenPair(token, None, None, None))


def approve(double: GitHubDouble, db: Database, config_text: str) -> None:
    """Every schedule of `config_text` approved by its owner, as the page's button does."""
    config, _ = parse_repo_config(config_text)
    for schedule in config.schedules:
        owner_id = double.user(schedule.owner).id
        digest, text = version(schedule, config)
        row = schedule_approvals.ask(
            db, REPO, schedule.name, digest, schedule.owner, owner_id, text
        )
        assert schedule_approvals.approve(db, row.id, owner_id, digest)


class Beat:
    """One beat process's worth of tick: its own database engine, GitHub client and cache."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.db = Database(settings.database_url)
        meter = Telemetry(settings.redis_url)
        self.github = GitHubApp(settings, WriteSlots.for_settings(settings), meter)
        self.etags = ETagCache()

    def tick(self, now: datetime) -> list[Fired]:
        return tick(self.settings, self.github, self.db, self.etags, now=now)

    def close(self) -> None:
        self.db.dispose()
