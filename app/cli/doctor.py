"""`onloop doctor`: one line per check, each failure with what to do about it."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import click
import redis
import requests
from github import GithubException
from pydantic import ValidationError

import app.github.clients as gh
from app.core.publicurl import oauth_callback_url, public_url_problem, webhook_url
from app.core.settings import Settings
from app.core.tracing import ENDPOINT_VARS, Exporter, TracingConfigError, choose_exporter
from app.github.manifest import EVENTS
from app.github.transport import fail_fast
from app.policy.org_config import load_org_config
from app.policy.repo_config import ConfigError
from app.store import migrate
from tasks.agent.factory import config_problems
from tasks.sandbox.egress.policy import load_credentials
from tasks.sandbox.egress.tls import check_ca_bundle

LOOPBACK = ("localhost", "127.0.0.1", "::1")


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    hint: str = ""


def _settings(s: Settings) -> Check:
    missing = s.missing()
    if missing:
        return Check(
            "settings", False, "missing " + ", ".join(missing), "set them in .env (README)"
        )
    return Check("settings", True, "all required settings present")


def _webhook_secret(s: Settings) -> Check:
    secret = s.webhook_secret.get_secret_value() if s.webhook_secret else ""
    if not secret:
        return Check("webhook secret", False, "not set", "set ONLOOP_WEBHOOK_SECRET to the App's")
    if len(secret) < 16:
        return Check("webhook secret", False, "shorter than 16 characters", "use a long random one")
    return Check("webhook secret", True, "set")


def _database(s: Settings) -> Check:
    missing = migrate.missing_sqlite_file(s.database_url)
    if missing is not None:
        return Check("database", False, f"no database at {missing}", "run `onloop db upgrade`")
    try:
        at, head = migrate.current(s.database_url), migrate.head()
    except Exception as exc:
        return Check(
            "database", False, f"cannot connect ({type(exc).__name__})", "check ONLOOP_DATABASE_URL"
        )
    if at != head:
        return Check(
            "database",
            False,
            f"at revision {migrate.describe(at)}, code expects {migrate.describe(head)}",
            "run `onloop db upgrade`",
        )
    return Check("database", True, f"reachable, at revision {migrate.describe(at)}")


def _public_url(s: Settings) -> Check:
    problem = public_url_problem(s.public_url)
    if problem:
        return Check("public url", False, f"ONLOOP_PUBLIC_URL {s.public_url!r} {problem}", "fix it")
    detail = (
        f"{s.public_url}: the App's webhook URL must be {webhook_url(s.public_url)}"
        f" and its callback URL {oauth_callback_url(s.public_url)}"
    )
    if (urlsplit(s.public_url).hostname or "") in LOOPBACK:
        detail += " (a loopback address: GitHub reaches it only through a tunnel)"
    return Check("public url", True, detail)


def _redis(s: Settings) -> Check:
    if not s.redis_url:
        return Check("redis", False, "ONLOOP_REDIS_URL not set", "set it (onloop dev starts one)")

    try:
        redis.Redis.from_url(s.redis_url, socket_connect_timeout=2, socket_timeout=2).ping()
    except Exception as exc:
        return Check(
            "redis", False, f"no answer ({type(exc).__name__})", "start Redis or fix the URL"
        )
    return Check("redis", True, "answers PING")


def _docker(s: Settings) -> Check:
    if s.sandbox_backend != "docker":
        return Check("docker", True, f"not used (sandbox backend {s.sandbox_backend})")
    # loaded by this check only: the Docker SDK, `onloop --help` stays fast
    import docker

    from tasks.sandbox.egress.fitness import BUILD_HINT, self_check

    try:
        client = docker.from_env(timeout=5)
        client.ping()
    except Exception as exc:
        return Check(
            "docker",
            False,
            f"daemon unreachable ({type(exc).__name__})",
            "start dockerd or set DOCKER_HOST",
        )
    try:
        client.images.get(s.sandbox_image)
    except Exception:
        return Check(
            "docker", False, f"image {s.sandbox_image} missing", "onloop sandbox build-image"
        )
    why = self_check(client, s.sandbox_image)
    if why is not None:  # every job with a `sandbox.setup` would fail
        return Check(
            "docker",
            False,
            f"image {s.sandbox_image} cannot run a job's sandbox.setup ({why}): "
            "not built by `onloop sandbox build-image`",
            BUILD_HINT,
        )
    return Check("docker", True, f"daemon up, image {s.sandbox_image} present, self-check ok")


def _github(s: Settings) -> Check:
    if s.app_id is None or s.private_key_path is None:
        return Check(
            "github app", False, "ONLOOP_APP_ID or ONLOOP_PRIVATE_KEY_PATH unset", "set both"
        )
    if not s.private_key_path.exists():
        return Check(
            "github app", False, f"no key at {s.private_key_path}", "download the App's key"
        )
    try:
        with fail_fast():  # no retries with backoff: minutes of silence before the answer
            slug, events = gh.GitHubApp.for_settings(s).app_info()
    except Exception as exc:
        return Check("github app", False, *explain_failure(exc, s.github_api_url))
    if s.app_slug and slug != s.app_slug:
        return Check("github app", False, f"App slug is {slug}", f"set ONLOOP_APP_SLUG={slug}")
    missing = [e for e in EVENTS if e not in events]
    if missing:  # an App made before onloop listened to them: GitHub sends them to nobody
        return Check(
            "github app",
            False,
            f"App {slug} does not subscribe to {', '.join(missing)}",
            "tick them under the App's Permissions & events, Subscribe to events",
        )
    return Check("github app", True, f"JWT accepted, App {slug}")


def _agent(s: Settings) -> Check:
    problems = config_problems(s)
    if problems:
        return Check("agent", False, "; ".join(problems), "set it in .env (README, Settings)")
    if s.agent == "openai":
        return Check("agent", True, f"openai: model {s.agent_model} at {s.agent_base_url}")
    return Check("agent", True, s.agent if s.agent == "command" else "none (no LLM steps)")


def _egress(s: Settings) -> Check:
    said = []
    for setting, path in (
        ("ONLOOP_EGRESS_CREDENTIALS_FILE", s.egress_credentials_file),
        ("ONLOOP_EGRESS_CA_FILE", s.egress_ca_file),
    ):
        if path is None:
            continue
        try:  # what is wrong, never what the file holds
            if setting == "ONLOOP_EGRESS_CA_FILE":
                said.append(f"{check_ca_bundle(path.read_bytes())} private index CA(s)")
            else:
                said.append(f"credentials for {len(load_credentials(path.read_text()))} index(es)")
        except OSError as exc:
            return Check("egress", False, f"{setting}: {exc.strerror}", f"check {path}")
        except ValueError as exc:
            hint = (
                "see README, Settings" if "CREDENTIALS" in setting else "give PEM CA certificates"
            )
            return Check("egress", False, f"{setting}: {exc}", hint)
    return Check("egress", True, ", ".join(said) or "no private index settings")


def _org_config(s: Settings) -> Check:
    path = s.config_file
    if path is None:
        return Check("org config", True, "no ONLOOP_CONFIG_FILE: built-in defaults")
    try:
        load_org_config(s)
    except OSError as exc:
        problem, line = exc.strerror or type(exc).__name__, None
    except ConfigError as exc:  # some loaders put the file first in the message
        problem, line = exc.message.removeprefix(f"{path}: "), exc.line
    else:
        return Check("org config", True, f"{path} is valid")
    where = f"{path}, line {line}" if line else str(path)
    readable = path.is_file() and os.access(path, os.R_OK)
    return Check(
        "org config",
        False,
        f"ONLOOP_CONFIG_FILE: {where}: {problem}",
        "fix it (the keys of .github/onloop.yml; config/onloop.example.yml)"
        if readable
        else "check the path and its permissions, or unset it",
    )


def _traces(s: Settings) -> Check:
    """Whether the OTEL_* variables switch traces on, and where they would go."""
    try:
        exporter = choose_exporter(os.environ)
    except TracingConfigError as exc:
        return Check("traces", False, str(exc), "fix or unset it (README, Traces)")
    if exporter is Exporter.NONE:
        return Check("traces", True, "off (no OTEL_* variable switches them on)")
    if exporter is Exporter.CONSOLE:
        return Check("traces", True, "on: printed on standard output (OTEL_TRACES_EXPORTER)")
    endpoint = next((os.environ[v] for v in ENDPOINT_VARS if os.environ.get(v, "").strip()), "")
    where = urlsplit(endpoint.strip())  # scheme and host only: never credentials or a path
    port = f":{where.port}" if where.port else ""
    target = f"{where.scheme}://{where.hostname}{port}" if where.hostname else endpoint
    return Check("traces", True, f"on: OTLP/HTTP to {target}")


CHECKS: list[Callable[[Settings], Check]] = [
    _settings,
    _webhook_secret,
    _public_url,
    _database,
    _redis,
    _docker,
    _github,
    _agent,
    _egress,
    _org_config,
    _traces,
]


def explain_failure(exc: BaseException, api_url: str) -> tuple[str, str]:
    """(what went wrong, what to do) for a failed call to GitHub, for the command line:
    GitHub out of reach is told apart from GitHub refusing the App's credentials."""
    if isinstance(exc, requests.RequestException):
        return f"cannot reach GitHub at {api_url}: {_reason(exc)}", (
            "check ONLOOP_GITHUB_API_URL / network"
        )
    if isinstance(exc, GithubException):
        data = exc.data if isinstance(exc.data, dict) else {}
        said = f"{exc.status} {exc.message or data.get('message') or ''}".strip()
        if exc.status == 401:
            return f"GitHub refused the App's JWT ({said})", (
                "check ONLOOP_APP_ID matches the key, and the machine clock"
            )
        if exc.status == 404:
            return f"{api_url} answered {said}", (
                "check ONLOOP_GITHUB_API_URL (GitHub Enterprise Server: https://HOST/api/v3)"
            )
        return f"GitHub at {api_url} answered {said}", "try again later; see its status page"
    return f"call to GitHub failed ({type(exc).__name__})", (
        "check ONLOOP_APP_ID and ONLOOP_PRIVATE_KEY_PATH (the App's PEM key)"
    )


def _reason(exc: requests.RequestException) -> str:
    """The innermost reason of a requests error, without urllib3's object and pool reprs."""
    inner: Any = exc.args[0] if exc.args else exc
    inner = getattr(inner, "reason", None) or inner  # MaxRetryError: the connection's error
    text = str(inner)
    text = re.sub(r"^<[^>]*>: ", "", text)  # "<urllib3.connection.HTTPConnection ...>: "
    text = re.sub(r"^\w+ConnectionPool\([^)]*\): ", "", text)
    return text or type(exc).__name__


def run_doctor(settings: Settings | ValidationError, sources: str = "") -> int:
    """Print every check (after `sources`: where the values came from); 1 if any failed."""
    if sources:
        click.echo(f"ok   sources: {sources}")
    if isinstance(settings, ValidationError):
        for e in settings.errors():
            name = f"ONLOOP_{str(e['loc'][0]).upper()}" if e["loc"] else "settings"
            click.echo(f"FAIL settings: {name}: {e['msg']} -> fix its value")
        return 1
    failed = 0
    for check in CHECKS:
        try:
            result = check(settings)
        except Exception as exc:
            result = Check(check.__name__.strip("_"), False, f"check crashed: {type(exc).__name__}")
        failed += not result.ok
        line = f"{'ok  ' if result.ok else 'FAIL'} {result.name}: {result.detail}"
        click.echo(line + (f" -> {result.hint}" if result.hint and not result.ok else ""))
    return 1 if failed else 0
