"""Organisation defaults (`ONLOOP_CONFIG_FILE`) and the effective config: a repository's
`.github/onloop.yml` may narrow them but never widen them."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from app.core.settings import Settings
from app.policy.campaign_file import org_campaigns_repository
from app.policy.dashboard import org_operators
from app.policy.egress import narrow_egress
from app.policy.images import allowed_images, check_operator_image, choose_image
from app.policy.repo_config import (
    EFFECTIVE,
    ORG_ONLY,
    PERMISSION_RANK,
    CommitMode,
    ConfigError,
    RepoConfig,
    line_of,
    parse_repo_config,
)


class OrgConfigError(ConfigError):
    """The organisation file is missing, unreadable or invalid; names the file (and line)."""

    def __init__(self, path: Path, message: str, line: int | None = None) -> None:
        super().__init__(message, line)
        self.path = path

    def __str__(self) -> str:
        where = f"{self.path}, line {self.line}" if self.line else str(self.path)
        return f"{where}: {self.message}"


def parse_org_config(text: str) -> RepoConfig:
    """The organisation file: the keys of .github/onloop.yml; unknown keys are errors here
    (an operator's typo must not silently leave a default in force)."""
    config, unknown = parse_repo_config(text)
    unknown = [key for key in unknown if key not in ORG_ONLY]
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r}", line_of(text, unknown[0].split(".")))
    org_images(text)
    org_operators(text)
    org_campaigns_repository(text)
    return config


def org_images(text: str) -> tuple[str, ...]:
    """The organisation file's `sandbox.images`: the images (besides ONLOOP_SANDBOX_IMAGE)
    a repository's `sandbox.image` may name; ConfigError (with the line) for a bad entry."""
    data = yaml.safe_load(text) if text.strip() else None
    sandbox = data.get("sandbox") if isinstance(data, dict) else None
    listed = sandbox.get("images") if isinstance(sandbox, dict) else None
    if listed is None:
        return ()
    if not isinstance(listed, list):
        raise ConfigError(
            "sandbox.images: a list of image names", line_of(text, ["sandbox", "images"])
        )
    for i, name in enumerate(listed):
        try:
            if not isinstance(name, str):
                raise ValueError("an image name, e.g. python:3.12-slim")
            check_operator_image(name)
        except ValueError as exc:
            raise ConfigError(
                f"sandbox.images.{i}: {exc}", line_of(text, ["sandbox", "images", i])
            ) from None
    return tuple(listed)


def load_org_config(settings: Settings) -> RepoConfig:
    """The organisation defaults from `settings.config_file`; onloop's built-in defaults when
    no file is set. Raises OrgConfigError naming the file (and the line) when it is missing,
    unreadable or not valid. Read afresh: a worker reads it through its OrgConfigLoader."""
    if settings.config_file is None:
        return RepoConfig()
    return read_org_file(Path(settings.config_file))


def read_org_file(path: Path) -> RepoConfig:
    """The organisation file at `path`; OrgConfigError naming the file (and the line) when it
    is missing, unreadable or not valid."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise OrgConfigError(path, f"cannot be read ({_reason(exc)})") from None
    return _parse(path, text)


def _parse(path: Path, text: str) -> RepoConfig:
    return _parse_file(path, text)[0]


def _parse_file(path: Path, text: str) -> tuple[RepoConfig, tuple[str, ...]]:
    try:
        return parse_org_config(text), org_images(text)
    except ConfigError as exc:
        raise OrgConfigError(path, exc.message, exc.line) from None


class OrgConfigLoader:
    """The organisation file as one worker reads it for its jobs: parsed again only when it
    changes (its mtime or size), so an edited file takes effect without a restart."""

    def __init__(self) -> None:
        self._seen: dict[Path, tuple[tuple[int, int], tuple[RepoConfig, tuple[str, ...]]]] = {}
        self._lock = threading.Lock()

    def load(self, settings: Settings) -> RepoConfig:
        """`load_org_config`, from the last parse while the file is unchanged."""
        return self._file(settings)[0]

    def images(self, settings: Settings) -> tuple[str, ...]:
        """The images jobs may run: ONLOOP_SANDBOX_IMAGE first, then `sandbox.images`."""
        return allowed_images(settings.sandbox_image, self._file(settings)[1])

    def sandbox_image(self, settings: Settings, requested: str | None) -> str:
        """The image a job runs for the repository's `sandbox.image` (None: the default);
        ImageNotAllowed, naming the allowed images, for any name the operator did not list."""
        return choose_image(requested, self.images(settings))

    def _file(self, settings: Settings) -> tuple[RepoConfig, tuple[str, ...]]:
        if settings.config_file is None:
            return RepoConfig(), ()
        path = Path(settings.config_file)
        try:
            stat = path.stat()
            version = (stat.st_mtime_ns, stat.st_size)
            with self._lock:
                seen = self._seen.get(path)
            if seen is not None and seen[0] == version:
                return seen[1]
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise OrgConfigError(path, f"cannot be read ({_reason(exc)})") from None
        parsed = _parse_file(path, text)
        with self._lock:
            self._seen[path] = (version, parsed)
        return parsed

    def effective(self, settings: Settings, repo: RepoConfig) -> RepoConfig:
        """`effective_for`, with the organisation file from `load`."""
        return effective_config(self.load(settings), repo)


def _reason(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return type(exc).__name__


def check_file(path: Path) -> str:
    """Validate the organisation file at `path` as the services read it: a one-line summary
    of what it sets, or OrgConfigError naming the file (and the line) when it is missing,
    unreadable or invalid. `onloop web`, `worker` and `dev` refuse to start on that error."""
    config = read_org_file(path)
    images = org_images(path.read_text(encoding="utf-8"))
    return (
        f"{path}: commands {', '.join(config.commands) or 'none'}; "
        f"trigger_permission {config.trigger_permission}; "
        f"auto_fix_ci {'on' if config.auto_fix_ci else 'off'}, "
        f"at most {config.max_ci_fix_attempts} attempt(s); "
        f"sandbox timeout {config.sandbox.timeout}s; "
        f"{len(config.paths.deny)} denied path pattern(s); "
        f"{len(images)} image(s) besides ONLOOP_SANDBOX_IMAGE; "
        f"rebase backups kept {config.backup_days} days"
    )


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


def _stricter_commits(org: CommitMode, repo: CommitMode) -> CommitMode:
    """Verified commits when either file asks for them: a repository may not opt out."""
    return CommitMode.VERIFIED if CommitMode.VERIFIED in (org, repo) else CommitMode.GIT


def _union(org: list[str], repo: list[str]) -> list[str]:
    return [*org, *(p for p in repo if p not in org)]


BUDGET_KEYS = ("agent_tokens", "cost_usd", "sandbox_minutes", "jobs")


def _lower(org: float | None, repo: float | None) -> float | None:
    """A budget: the smaller of the two; no limit only when neither sets one."""
    if org is None or repo is None:
        return repo if org is None else org
    return min(org, repo)


def raised_budgets(org: RepoConfig, repo: RepoConfig) -> list[str]:
    """The repository's `budgets:` keys that ask for more than the organisation's (refused:
    the organisation's value stays in force)."""
    raised = []
    for name in BUDGET_KEYS:
        mine, theirs = getattr(org.budgets, name), getattr(repo.budgets, name)
        if mine is not None and theirs is not None and theirs > mine:
            raised.append(f"budgets.{name}")
    return raised


def effective_config(org: RepoConfig, repo: RepoConfig) -> RepoConfig:
    """The config a job runs under. What the repository did not set comes from the org; what
    it set may only narrow: commands intersect, auto_fix_ci needs both, attempts, limits and
    the sandbox timeout take the smaller, trigger_permission the stricter, commits `verified`
    when either says so, paths.deny the union. Other keys (image, setup, checks, fix_label,
    rebase) are the repository's own choice."""
    top = _narrow_section(
        org,
        repo,
        {
            "commands": lambda o, r: [c for c in o if c in r],
            "auto_fix_ci": lambda o, r: o and r,
            "max_ci_fix_attempts": min,
            "trigger_permission": _stricter_permission,
            "fix_label": None,
            "commits": _stricter_commits,
            "rebase": None,
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
        ("budgets", {name: _lower for name in BUDGET_KEYS}),
    ):
        org_part, repo_part = getattr(org, section), getattr(repo, section)
        top[section] = _narrow_section(org_part, repo_part, rules, _given(repo, section))
    return RepoConfig.model_validate(top, context={EFFECTIVE: True})


def effective_for(settings: Settings, repo: RepoConfig) -> RepoConfig:
    """`effective_config` under the organisation file from `settings`; without one, onloop's
    built-in defaults are the organisation's, so a repository still only narrows them."""
    return effective_config(load_org_config(settings), repo)
