"""Where each ONLOOP_* value comes from (environment, .env, dev's generated secrets), for doctor."""

from __future__ import annotations

import os
from pathlib import Path

from dotenv import dotenv_values

from app.cli.dev import DEV_SECRETS, ENV_FILE, person_set, stored_dev_secrets

ENVIRONMENT = "the environment"


def use_dev_secrets(env_file: Path = ENV_FILE) -> list[str]:
    """Fill what the person left unset with dev's generated secrets, as `onloop dev` does (in
    this process's environment only); the names filled."""
    filled = [k for k in stored_dev_secrets() if not person_set(k, env_file)]
    for name in filled:
        os.environ[name] = stored_dev_secrets()[name]
    return filled


def value_sources(env_file: Path = ENV_FILE, dev_filled: tuple[str, ...] = ()) -> dict[str, str]:
    """Each ONLOOP_* name that is set, and where from: the environment wins over .env (as in
    app.core.settings), and dev's file fills only what neither sets."""
    sources: dict[str, str] = {}
    if env_file.exists():
        for name, value in dotenv_values(env_file).items():
            if name.startswith("ONLOOP_") and value:
                sources[name] = str(env_file)
    for name, value in os.environ.items():
        if name.startswith("ONLOOP_") and value:
            sources[name] = str(DEV_SECRETS) if name in dev_filled else ENVIRONMENT
    return dict(sorted(sources.items()))


def by_source(sources: dict[str, str]) -> str:
    """`from .env: A, B; from the environment: C`, for one line of doctor's."""
    groups: dict[str, list[str]] = {}
    for name, source in sources.items():
        groups.setdefault(source, []).append(name)
    return "; ".join(f"from {where}: {', '.join(names)}" for where, names in groups.items())
