"""onloop's settings: read once from ONLOOP_* variables or a .env file, then passed around."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# Settings a process needs before it may serve webhooks or run jobs (`onloop web`/`worker`).
REQUIRED_FOR_SERVICE: tuple[str, ...] = (
    "app_id",
    "app_slug",
    "private_key_path",
    "webhook_secret",
    "client_id",
    "client_secret",
    "secret_key",
)


class Settings(BaseSettings):
    """Every ONLOOP_* setting; the names and defaults are the design's interface contract."""

    model_config = SettingsConfigDict(
        env_prefix="ONLOOP_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    github_url: str = "https://github.com"
    github_api_url: str = "https://api.github.com"
    app_id: int | None = None
    app_slug: str | None = None
    private_key_path: Path | None = None
    webhook_secret: SecretStr | None = None
    client_id: str | None = None
    client_secret: SecretStr | None = None
    public_url: str = "http://localhost:8000"
    secret_key: SecretStr | None = None
    database_url: str = "sqlite:///var/onloop.db"
    redis_url: str | None = None
    sandbox_backend: Literal["docker", "local"] = "docker"
    sandbox_image: str = "onloop-sandbox:latest"
    sandbox_runtime: str | None = None
    # The local (bubblewrap) backend's read-only root: an unpacked image the operator built
    # (e.g. with mmdebstrap); unset, the host's /usr and a few /etc files. Never a repo's.
    sandbox_rootfs: Path | None = None
    # A job's workspace (and Docker's writable layer) past this stops the job; 0: unchecked.
    sandbox_disk_limit_mb: int = Field(default=4096, ge=0)
    sandbox_pool_size: int = Field(default=1, ge=0)  # warm blank containers kept ready
    snapshot_max_bytes: int = 20 * 2**30  # dependency snapshots kept, least recently used out
    reap_interval: int = Field(default=300, ge=10)  # seconds between sandbox reaper sweeps
    egress_credentials_file: Path | None = None  # YAML: private index URL -> credentials
    egress_ca_file: Path | None = None  # PEM: CAs the setup proxy trusts for private indexes
    work_dir: Path = Path("var/work")  # mirrors and job workspaces on the worker
    authorization_wait: int = Field(default=24 * 3600, ge=60)  # seconds a job waits for OAuth
    agent: Literal["none", "openai", "command"] = "none"
    # The agent harness (tasks/agent): an OpenAI-compatible endpoint, or a command line.
    agent_base_url: str = "https://api.openai.com/v1"
    agent_model: str = "gpt-4o-mini"
    agent_api_key: SecretStr | None = None
    agent_command: str | None = None
    agent_max_steps: int = Field(default=30, ge=1)  # model turns per agentic step
    agent_wall_seconds: int = Field(default=900, ge=10)
    agent_max_tokens: int = Field(default=200_000, ge=1000)
    # The price of each model, for the budgets' estimated cost: JSON, model → USD per 1M
    # tokens, e.g. {"gpt-4o-mini": {"input": 0.15, "output": 0.6}}; a model not named costs 0.
    model_prices: dict[str, dict[str, float]] = Field(default_factory=dict)

    # Not in the design's table, but named the same way.
    fix_label: str = "agent:fix"
    max_body_bytes: int = 25 * 1024 * 1024
    # Seconds: a comment or label delivery whose act is older starts no work (a replayed body
    # under a fresh GUID, or GitHub's redelivery after a long outage); app.intake.freshness.
    max_event_age: int = Field(default=3600, ge=60)
    job_time_limit: int = Field(default=3600, ge=1)
    # Seconds past a job's time limit after which the watchdog gives it a final outcome
    # (tasks.queue.watchdog), and seconds between its sweeps.
    watchdog_grace: int = Field(default=300, ge=0)
    watchdog_interval: int = Field(default=60, ge=1)
    job_lease_seconds: int = Field(default=60, ge=2)  # a dead worker's job is run again after
    dispatch_interval: float = 1.0
    # Seconds: a job still queued this long after its last message went out is published
    # again (a Redis restart without persistence forgets its queue). A duplicate is harmless:
    # only one attempt can claim a queued job (tasks.runner.lease).
    republish_after: int = Field(default=120, ge=10)
    # Seconds between edits of one status comment or check run (the last edit is never held).
    feedback_interval: float = Field(default=1.0, ge=0)
    redeliver_interval: int = 3600
    # PyGithub's pacing between requests, as GitHub asks of integrations; off for the double.
    github_pacing: bool = True
    # Concurrent GitHub writes per installation or user, across workers (app.github.write_slots).
    github_write_concurrency: int = Field(default=4, ge=1, le=20)
    # Governance: organisation defaults (YAML, the keys of .github/onloop.yml) and job caps.
    config_file: Path | None = None
    max_jobs_per_installation: int = Field(default=10, ge=1)
    max_jobs_per_repo: int = Field(default=3, ge=1)
    job_starts_per_minute: int = Field(default=60, ge=1)
    job_start_burst: int = Field(default=10, ge=1)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    log_json: bool = True
    # gunicorn (config/gunicorn.conf.py) for `onloop web`.
    web_workers: int = Field(default=2, ge=1)
    web_threads: int = Field(default=8, ge=1)
    # Seconds a web thread waits for a whole request (line, headers, body) before it drops it.
    web_read_timeout: float = Field(default=5.0, gt=0)
    access_log: bool = True
    # The job pages (app/web/pages): days a job's output is kept for its page (the beat purges
    # older), its cap in bytes per job (the oldest lines go first), and minutes a person's
    # read access to a repository, checked with their own token, is remembered in Redis.
    job_log_days: int = Field(default=30, ge=1)
    job_log_max_bytes: int = Field(default=2 * 2**20, ge=4096)
    dashboard_access_minutes: int = Field(default=5, ge=1)
    # Hours a signed-in session lasts (kept in Redis, its id in an HttpOnly cookie).
    session_hours: int = Field(default=12, ge=1)

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_log_level(cls, value: object) -> object:
        """`debug` means DEBUG; logging and structlog know only the upper-case names."""
        return value.strip().upper() if isinstance(value, str) else value

    @property
    def bot_login(self) -> str | None:
        """The login GitHub gives the App's own actions: `<slug>[bot]`."""
        return f"{self.app_slug}[bot]" if self.app_slug else None

    @property
    def visibility_timeout(self) -> int:
        """Redis visibility timeout: longer than the longest job, so none is redelivered early."""
        return self.job_time_limit * 2 + 300

    def missing(self, names: tuple[str, ...] = REQUIRED_FOR_SERVICE) -> list[str]:
        """The ONLOOP_* variable names among `names` that have no value."""
        return [f"ONLOOP_{n.upper()}" for n in names if getattr(self, n) in (None, "")]


def load_settings(**overrides: object) -> Settings:
    """Build the settings once; tests and `onloop dev` pass overrides."""
    return Settings(**overrides)  # type: ignore[arg-type]
