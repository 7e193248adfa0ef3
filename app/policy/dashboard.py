"""The organisation file's `dashboard.operators`: the people (logins, or `org/team`) who see
every job on onloop's pages; everyone else sees the jobs of repositories they can read."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from app.core.settings import Settings
from app.policy.repo_config import ConfigError, line_of

_LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$")
_TEAM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def org_operators(text: str) -> tuple[str, ...]:
    """`dashboard.operators` as written (logins and `org/team`); ConfigError with the line
    for anything else."""
    data = yaml.safe_load(text) if text.strip() else None
    section = data.get("dashboard") if isinstance(data, dict) else None
    if section is None:
        return ()
    if not isinstance(section, dict) or set(section) - {"operators"}:
        raise ConfigError("dashboard: only `operators` may be set", line_of(text, ["dashboard"]))
    listed = section.get("operators") or []
    where = ["dashboard", "operators"]
    if not isinstance(listed, list):
        raise ConfigError("dashboard.operators: a list of logins or org/team", line_of(text, where))
    for i, name in enumerate(listed):
        if not isinstance(name, str) or not (_LOGIN.match(name) or _TEAM.match(name)):
            raise ConfigError(
                f"dashboard.operators.{i}: a GitHub login or org/team", line_of(text, [*where, i])
            )
    return tuple(listed)


def operators(settings: Settings) -> tuple[str, ...]:
    """The operators named in ONLOOP_CONFIG_FILE (none without one). The file is read each
    time (callers cache the answer per person); an unreadable or invalid one names nobody."""
    if settings.config_file is None:
        return ()
    try:
        return org_operators(Path(settings.config_file).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ConfigError, yaml.YAMLError):
        return ()
