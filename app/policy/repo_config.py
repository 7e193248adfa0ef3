"""`.github/onloop.yml`: the per-repository settings, validated with pydantic."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Literal, get_args

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from app.policy.egress import EgressEntry, check_entry
from app.policy.images import check_reference
from app.policy.path_rules import MAX_PATTERNS, check_count, check_pattern
from app.policy.schedules import Schedule, duplicate_names

Permission = Literal["read", "triage", "write", "maintain", "admin"]
PERMISSION_RANK: dict[str, int] = {"read": 0, "triage": 1, "write": 2, "maintain": 3, "admin": 4}
ALLOWED_COMMANDS = ("fix", "rebase", "review")
Verb = Literal["fix", "rebase", "review"]
EFFECTIVE = "effective"  # validation context key: the merged organisation + repository config
# Keys only the organisation file (ONLOOP_CONFIG_FILE) sets: a repository's file that sets one
# hears so beside its unknown keys, and effective_config keeps the organisation's value.
ORG_ONLY = (
    "sandbox.images",
    "sandbox.untrusted_egress",
    "sandbox.private_indexes",
    "budgets.installation",
    "backup_days",
    "dashboard",  # who sees every job on the pages (app/policy/dashboard.py)
)


def _all_commands() -> list[Verb]:
    return ["fix", "rebase", "review"]


class UntrustedEgress(StrEnum):
    """What setup of an untrusted head may reach (`sandbox.untrusted_egress`)."""

    NONE = "none"  # nothing: setup runs with no network
    PUBLIC = "public"  # the egress list, without credentials, private indexes or the cache


class CommitMode(StrEnum):
    """How onloop writes commits to a branch (`commits`)."""

    GIT = "git"  # a git push of the commits made in the sandbox
    VERIFIED = "verified"  # GraphQL createCommitOnBranch: GitHub signs them (Verified)


class RebaseMode(StrEnum):
    """What `/agent rebase` does where commits must be verified (`rebase`)."""

    REFUSE = "refuse"  # history rewritten by a rebase cannot be verified commits
    MERGE = "merge"  # GitHub merges the base into the head instead (a signed merge commit)


class _Section(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class SandboxConfig(_Section):
    # An image name (never a host path); the operator's `sandbox.images` decides whether a
    # job may run it (app.policy.images.choose_image).
    image: str | None = None
    setup: str | None = None
    timeout: int = Field(default=900, ge=10, le=6 * 3600)
    # Registries setup may reach (names or URLs); None: the organisation's list. It can only
    # narrow that list (app.policy.egress.narrow_egress).
    egress: list[EgressEntry] | None = None

    @field_validator("image")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        return None if value is None else check_reference(value)

    @field_validator("egress")
    @classmethod
    def _egress(cls, value: list[EgressEntry] | None) -> list[EgressEntry] | None:
        return None if value is None else [check_entry(e) for e in value]

    # The organisation file's alone (effective_config keeps its value whatever a repository
    # says): what setup of an untrusted head (a fork's, an outsider's) may reach...
    untrusted_egress: UntrustedEgress = UntrustedEgress.NONE
    # ...and the hosts of private indexes, the only ones setup may reach at a private address.
    private_indexes: list[str] = Field(default_factory=list)


class ChecksConfig(_Section):
    fix: list[str] | None = None
    test: str | None = None


DenyPattern = Annotated[str, AfterValidator(check_pattern)]  # at most 200 chars, valid


class PathsConfig(_Section):
    deny: list[DenyPattern] = Field(default_factory=lambda: [".github/workflows/**"])

    @field_validator("deny")
    @classmethod
    def _deny(cls, value: list[str], info: ValidationInfo) -> list[str]:
        # One file names at most MAX_PATTERNS; the effective list (EFFECTIVE context) is the
        # union of the organisation's file and the repository's, so twice that.
        combined = isinstance(info.context, dict) and info.context.get(EFFECTIVE)
        return check_count(value, MAX_PATTERNS * (2 if combined else 1))


class LimitsConfig(_Section):
    max_files: int = Field(default=20, ge=1)
    max_changed_lines: int = Field(default=500, ge=1)
    max_file_bytes: int = Field(default=1024 * 1024, ge=1)  # any one added or changed file


class ReviewConfig(_Section):
    request_changes: bool = False  # `/agent review` may request changes (never approves)


class BudgetLimits(_Section):
    """What may be spent in one UTC day; None: no limit."""

    agent_tokens: int | None = Field(default=None, ge=0)  # input + output tokens
    cost_usd: float | None = Field(default=None, ge=0)  # estimated from ONLOOP_MODEL_PRICES
    sandbox_minutes: float | None = Field(default=None, ge=0)
    jobs: int | None = Field(default=None, ge=0)  # sandboxed jobs started


class BudgetsConfig(BudgetLimits):
    """`budgets:` per repository per day; `installation` (the organisation file's alone) per
    installation per day. A repository's file may only lower the organisation's."""

    installation: BudgetLimits = Field(default_factory=BudgetLimits)


class RepoConfig(_Section):
    """Every key is optional; unknown keys are kept aside and reported, not fatal."""

    commands: list[Verb] = Field(default_factory=_all_commands)
    auto_fix_ci: bool = True
    max_ci_fix_attempts: int = Field(default=2, ge=0, le=10)
    trigger_permission: Permission = "write"
    fix_label: str = "agent:fix"
    # How long a rebase's backup ref (refs/onloop/backup/<branch>/<job id>) is kept; the
    # organisation file's alone (ORG_ONLY).
    backup_days: int = Field(default=30, ge=1, le=3650)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    checks: ChecksConfig = Field(default_factory=ChecksConfig)
    paths: PathsConfig = Field(default_factory=PathsConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    review: ReviewConfig = Field(default_factory=ReviewConfig)
    budgets: BudgetsConfig = Field(default_factory=BudgetsConfig)
    # `verified` also applies wherever GitHub requires signed commits (tasks/blueprints/signing.py)
    commits: CommitMode = CommitMode.GIT
    rebase: RebaseMode = RebaseMode.REFUSE
    # Work `onloop beat` starts at cron slots, each in its owner's name (app/policy/schedules.py);
    # the repository's own file alone says them (effective_config keeps the organisation's).
    schedules: list[Schedule] = Field(default_factory=list)

    @field_validator("schedules")
    @classmethod
    def _schedules(cls, value: list[Schedule]) -> list[Schedule]:
        if twice := duplicate_names(value):
            raise ValueError(f"two schedules are named {', '.join(twice)}; names must differ")
        return value

    def allows(self, verb: str) -> bool:
        return verb not in ALLOWED_COMMANDS or verb in self.commands


class ConfigError(Exception):
    """The file is not valid; `line` is 1-based where known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line else self.message


def _unknown_keys(data: dict[str, object], model: type[BaseModel], prefix: str = "") -> list[str]:
    """The keys no field reads, and the ORG_ONLY keys (read, but not from a repository)."""
    unknown: list[str] = []
    for key, value in data.items():
        field = model.model_fields.get(key)
        if field is None or prefix + str(key) in ORG_ONLY:
            unknown.append(prefix + str(key))
            continue
        annotation = field.annotation
        if isinstance(value, dict) and isinstance(annotation, type):
            if issubclass(annotation, BaseModel):
                unknown += _unknown_keys(value, annotation, f"{prefix}{key}.")
        elif isinstance(value, list) and (item := _item_model(annotation)) is not None:
            for index, entry in enumerate(value):  # a list of sections: `schedules.0.typo`
                if isinstance(entry, dict):
                    unknown += _unknown_keys(entry, item, f"{prefix}{key}.{index}.")
    return unknown


def _item_model(annotation: object) -> type[BaseModel] | None:
    """The model of a `list[Model]` field's items; None for any other field."""
    args = get_args(annotation)
    if len(args) == 1 and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        return args[0]
    return None


def parse_repo_config(text: str | None) -> tuple[RepoConfig, list[str]]:
    """Parse the file's text; returns the config and the keys it ignores (unknown ones, and
    the ORG_ONLY ones a repository may not set), or raises ConfigError."""
    if text is None or not text.strip():
        return RepoConfig(), []
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"not valid YAML: {problem}", line) from None
    if data is None:
        return RepoConfig(), []
    if not isinstance(data, dict):
        raise ConfigError("the file must be a mapping of keys to values", 1)
    try:
        config = RepoConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{where}: {first['msg']}", line_of(text, first["loc"])) from None
    return config, _unknown_keys(data, RepoConfig)


def line_of(text: str, loc: Sequence[int | str]) -> int | None:
    """The 1-based line of the deepest node of `loc` (a pydantic error location, or a dotted
    key split on dots) in the YAML text: the key of a mapping entry, the item of a list. It
    follows the parsed nodes, not the text, so nested and repeated key names are told apart."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    line: int | None = None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            found = [(k, v) for k, v in node.value if str(k.value) == str(part)]
            if not found:
                break
            key, node = found[-1]  # the last of repeated keys is the one that counts
            line = key.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if not 0 <= part < len(node.value):
                break
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line
