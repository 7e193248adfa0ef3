"""Organisation defaults (`ONLOOP_CONFIG_FILE`) and the effective config: a repository's
`.github/onloop.yml` may narrow them but never widen them."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from app.egress_config import narrow_egress
from app.repo_config import PERMISSION_RANK, ConfigError, RepoConfig, parse_repo_config
from app.settings import Settings

_cache: dict[Path, tuple[tuple[int, int], RepoConfig]] = {}
_lock = threading.Lock()


def parse_org_config(text: str) -> RepoConfig:
    """The organisation file: the keys of .github/onloop.yml; unknown keys are errors here
    (an operator's typo must not silently leave a default in force)."""
    config, unknown = parse_repo_config(text)
    if unknown:
        line = _line_of_key(text, unknown[0])
        raise ConfigError(f"unknown key {unknown[0]!r}", line)
    return config


def _line_of_key(text: str, dotted: str) -> int | None:
    last = dotted.rsplit(".", 1)[-1]
    for number, line in enumerate(text.splitlines(), start=1):
        if line.split("#", 1)[0].strip().startswith(f"{last}:"):
            return number
    return None


def load_org_config(settings: Settings) -> RepoConfig:
    """The organisation defaults from `settings.config_file`, read again only when the file
    changes; onloop's built-in defaults when no file is set. Raises ConfigError naming the
    file and line when it is not valid, and OSError when it cannot be read."""
    path = settings.config_file
    if path is None:
        return RepoConfig()
    path = Path(path)
    stat = path.stat()
    mtime = (stat.st_mtime_ns, stat.st_size)
    with _lock:
        cached = _cache.get(path)
        if cached is not None and cached[0] == mtime:
            return cached[1]
    try:
        config = parse_org_config(path.read_text(encoding="utf-8"))
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc.message}", exc.line) from None
    with _lock:
        _cache[path] = (mtime, config)
    return config


def _given(model: BaseModel, name: str) -> bool:
    """Whether the file set `name` (pydantic keeps which fields were given)."""
    return name in model.model_fields_set


def _narrow_section(
    org: BaseModel, repo: BaseModel, rules: dict[str, Any], given: bool
) -> dict[str, Any]:
    """Each field of a section: the org's value, or the rule applied to (org, repo) when the
    repo set it. A rule of None lets the repo's value replace the org's; a field with no rule
    at all stays the org's (a key added later cannot widen anything by accident)."""
    out: dict[str, Any] = {}
    for name in type(org).model_fields:
        mine, theirs = getattr(org, name), getattr(repo, name)
        if not (given and _given(repo, name)) or name not in rules:
            out[name] = mine
        elif rules[name] is None:
            out[name] = theirs
        else:
            out[name] = rules[name](mine, theirs)
    return out


def _stricter_permission(org: str, repo: str) -> str:
    return max(org, repo, key=lambda p: PERMISSION_RANK[p])


def _union(org: list[str], repo: list[str]) -> list[str]:
    return [*org, *(p for p in repo if p not in org)]


def effective_config(org: RepoConfig, repo: RepoConfig) -> RepoConfig:
    """The config a job runs under. What the repository did not set comes from the org; what
    it set may only narrow: commands intersect, auto_fix_ci needs both, attempts, limits and
    the sandbox timeout take the smaller, trigger_permission the stricter, paths.deny the
    union. Other keys (image, setup, checks, fix_label) are the repository's own choice."""
    top = _narrow_section(
        org,
        repo,
        {
            "commands": lambda o, r: [c for c in o if c in r],
            "auto_fix_ci": lambda o, r: o and r,
            "max_ci_fix_attempts": min,
            "trigger_permission": _stricter_permission,
            "fix_label": None,
        },
        True,
    )
    for section, rules in (
        (
            "sandbox",
            {
                "timeout": min,
                "image": None,
                "setup": None,
                "egress": lambda o, r: narrow_egress(o, r)[0],
            },
        ),
        ("checks", {"fix": None, "test": None}),
        ("review", {"request_changes": lambda o, r: o and r}),
        ("paths", {"deny": _union}),
        ("limits", {"max_files": min, "max_changed_lines": min, "max_file_bytes": min}),
    ):
        org_part, repo_part = getattr(org, section), getattr(repo, section)
        top[section] = _narrow_section(org_part, repo_part, rules, _given(repo, section))
    return RepoConfig.model_validate(top)


def effective_for(settings: Settings, repo: RepoConfig) -> RepoConfig:
    """`effective_config` with the organisation file from `settings`; without one there is
    no organisation ceiling and the repository's own config applies as it is."""
    if settings.config_file is None:
        return repo
    return effective_config(load_org_config(settings), repo)
