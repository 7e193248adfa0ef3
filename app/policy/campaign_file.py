"""A campaign file (YAML): one change across many repositories, parsed and validated with lines."""

from __future__ import annotations

import hashlib
import json
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, time
from pathlib import Path
from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from app.policy.repo_config import ConfigError, line_of, load_yaml

NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$")
FULL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$")
SELECTOR = re.compile(
    r"^(topic:[a-z0-9][a-z0-9-]{0,49}|language:[A-Za-z0-9+#. -]{1,40}|[\w.*?/-]+)$"
)
BRANCH = re.compile(r"^onloop/[A-Za-z0-9][A-Za-z0-9._/-]{0,200}$")
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
WINDOW = re.compile(
    r"^(?P<first>[A-Z][a-z]{2})(?:-(?P<last>[A-Z][a-z]{2}))?\s+"
    r"(?P<start>\d{2}:\d{2})-(?P<end>\d{2}:\d{2})(?:\s+(?P<tz>[A-Za-z_/+-]{1,40}))?$"
)
# What a title or body template may name: `${campaign}` and the like, nothing else.
FIELDS = ("campaign", "repository", "owner", "branch")
DEFAULT_TITLE = "${campaign}: campaign change"
DEFAULT_BODY = "This pull request is part of the campaign ${campaign}, run by @${owner}."


def _name(value: str) -> str:
    if not NAME.match(value):
        raise ValueError("lower-case letters, digits and dashes, at most 63")
    return value


def _login(value: str) -> str:
    if not LOGIN.match(value):
        raise ValueError("not a GitHub login")
    return value


def _selector(value: str) -> str:
    if not SELECTOR.match(value) or ".." in value:
        raise ValueError("a name glob (owner/name or name), `topic:x` or `language:y`")
    return value


def _full_name(value: str) -> str:
    if not FULL_NAME.match(value):
        raise ValueError("owner/name")
    return value


def _branch(value: str) -> str:
    if not BRANCH.match(value) or ".." in value or value.endswith((".lock", "/")):
        raise ValueError("a branch under `onloop/` (onloop pushes nowhere else)")
    return value


def _template(value: str) -> str:
    """A template names known fields only, as `${field}`; anything else is refused now, not
    left half-substituted in a pull request."""
    for match in string.Template.pattern.finditer(value):
        named = match.group("named") or match.group("braced")
        if match.group("invalid") is not None or (named and named not in FIELDS):
            raise ValueError(f"a template may name {', '.join('${' + f + '}' for f in FIELDS)}")
    return value


Name = Annotated[str, AfterValidator(_name)]
Login = Annotated[str, AfterValidator(_login)]
Selector = Annotated[str, AfterValidator(_selector)]
FullName = Annotated[str, AfterValidator(_full_name)]
Template = Annotated[str, AfterValidator(_template)]


@dataclass(frozen=True)
class Window:
    """When jobs may start: days `first`..`last` (0 = Monday), from `start` to `end`, in `tz`."""

    first: int
    last: int
    start: time
    end: time
    tz: str

    def open_at(self, now: datetime) -> bool:
        local = now.astimezone(ZoneInfo(self.tz))
        day = local.weekday()
        days = (
            self.first <= day <= self.last
            if self.first <= self.last
            else day >= self.first or day <= self.last
        )
        return days and self.start <= local.time().replace(tzinfo=None) < self.end


def parse_window(text: str) -> Window:
    """ "Mon-Fri 09:00-17:00 UTC" (one day, or a range; the zone defaults to UTC)."""
    match = WINDOW.match(text.strip())
    if match is None or match["first"] not in DAYS or (match["last"] or "Mon") not in DAYS:
        raise ValueError('like "Mon-Fri 09:00-17:00 UTC"')
    try:
        start, end = time.fromisoformat(match["start"]), time.fromisoformat(match["end"])
        tz = match["tz"] or "UTC"
        ZoneInfo(tz)
    except (ValueError, ZoneInfoNotFoundError):
        raise ValueError("a time HH:MM and an IANA time zone") from None
    if start >= end:
        raise ValueError("the window must end after it starts")
    first = DAYS.index(match["first"])
    return Window(first, DAYS.index(match["last"] or match["first"]), start, end, tz)


def _window(value: str) -> str:
    parse_window(value)
    return value


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ChangeSpec(Strict):
    """`run:` commands (run in the sandbox, in order) and/or a `task:` for the agent."""

    run: list[Annotated[str, Field(min_length=1, max_length=2000)]] = Field(
        default_factory=list, max_length=20
    )
    task: str | None = Field(default=None, max_length=20000)

    @model_validator(mode="after")
    def _something(self) -> ChangeSpec:
        if not self.run and not (self.task or "").strip():
            raise ValueError("a change needs `run:` commands, a `task:`, or both")
        return self


class Pacing(Strict):
    max_open_prs: int = Field(default=10, ge=1, le=1000)
    per_hour: int | None = Field(default=None, ge=1, le=10000)
    window: Annotated[str, AfterValidator(_window)] | None = None


class CampaignFile(Strict):
    """The whole file: who, where, what, and how fast."""

    name: Name
    owner: Login
    repositories: list[Selector] = Field(min_length=1, max_length=200)
    change: ChangeSpec
    branch: Annotated[str, AfterValidator(_branch)] | None = None
    title: Template = Field(default=DEFAULT_TITLE, max_length=200)
    body: Template = Field(default=DEFAULT_BODY, max_length=10000)
    pacing: Pacing = Field(default_factory=Pacing)
    depends_on: dict[FullName, list[FullName]] = Field(default_factory=dict)
    issue_repository: FullName | None = None

    @property
    def branch_name(self) -> str:
        return self.branch or f"onloop/campaign-{self.name}"

    @property
    def window(self) -> Window | None:
        return parse_window(self.pacing.window) if self.pacing.window else None

    def digest(self) -> str:
        """What the change is: a repository whose last run had another digest runs again."""
        text = json.dumps(
            [self.change.model_dump(), self.branch_name, self.title, self.body], sort_keys=True
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def render(self, template: str, repository: str) -> str:
        """A template with its known fields; `$$` is a dollar. Text is data: no format
        specifiers, attributes or indexing are ever evaluated."""
        values: Mapping[str, str] = {
            "campaign": self.name,
            "repository": repository,
            "owner": self.owner,
            "branch": self.branch_name,
        }
        return string.Template(template).safe_substitute(values)


def dependency_cycle(graph: Mapping[str, list[str]]) -> list[str] | None:
    """A cycle of `graph` (repo → the repos it depends on) as a path, or None."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        for dep in graph.get(node, []):
            if found := visit(dep, [*path, node]):
                return found
        done.add(node)
        return None

    for start in graph:
        if found := visit(start, []):
            return found
    return None


def parse_campaign(text: str) -> CampaignFile:
    """The campaign file's text, validated; ConfigError with the line otherwise."""
    data = load_yaml(text)
    if not isinstance(data, dict):
        raise ConfigError("a campaign file is a mapping of keys to values", 1)
    try:
        parsed = CampaignFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = [p for p in first["loc"] if not str(p).startswith("function-")]
        where = ".".join(str(p) for p in loc) or "the file"
        message = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
        message = message.removeprefix("Value error, ")
        raise ConfigError(f"{where}: {message}", line_of(text, loc)) from None
    if cycle := dependency_cycle(parsed.depends_on):
        raise ConfigError(
            f"depends_on: a cycle ({' → '.join(cycle)})", line_of(text, ["depends_on", cycle[0]])
        )
    return parsed


def org_campaigns_repository(text: str) -> str | None:
    """The organisation file's `campaigns.repository`: the configuration repository whose
    `campaigns/` folder holds campaign files (and their tracking issues); ConfigError with
    the line for anything else."""
    data = yaml.safe_load(text) if text.strip() else None
    section = data.get("campaigns") if isinstance(data, dict) else None
    if section is None:
        return None
    if not isinstance(section, dict) or set(section) - {"repository"}:
        raise ConfigError("campaigns: only `repository` may be set", line_of(text, ["campaigns"]))
    name = section.get("repository")
    if not isinstance(name, str) or not FULL_NAME.match(name):
        raise ConfigError(
            "campaigns.repository: owner/name", line_of(text, ["campaigns", "repository"])
        )
    return name


def campaigns_repository(config_file: Path | None) -> str | None:
    """`campaigns.repository` of ONLOOP_CONFIG_FILE; None without one (an unreadable or
    invalid file names none: `onloop doctor` reports it)."""
    if config_file is None:
        return None
    try:
        return org_campaigns_repository(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ConfigError, yaml.YAMLError):
        return None
