"""Wrap a command's real output in the GitHub Actions job log format (as the logs API serves it).

The shape follows real job logs: a timestamp on every line, `Set up job` lines, each step's
`##[group]Run ...` header with its script, shell and env, the step's output, and a failed
step's `##[error]Process completed with exit code N.`, then `Post job cleanup.`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

ESC = "\x1b"
SETUP = {
    "python": (
        "actions/setup-python@v5",
        ["python-version: 3.12", "check-latest: false", "token: ***", "update-environment: true"],
        ["##[group]Installed versions", "Successfully set up CPython (3.12.3)", "##[endgroup]"],
    ),
    "node": (
        "actions/setup-node@v4",
        ["node-version: 20", "always-auth: false", "check-latest: false", "token: ***"],
        [
            "Found in cache @ /opt/hostedtoolcache/node/20.12.2/x64",
            "##[group]Environment details",
            "node: v20.12.2",
            "npm: 10.5.0",
            "##[endgroup]",
        ],
    ),
    "go": (
        "actions/setup-go@v5",
        ["go-version: 1.19", "check-latest: false", "token: ***", "cache: true"],
        [
            "Setup go version spec 1.19",
            "Found in cache @ /opt/hostedtoolcache/go/1.19.13/x64",
            "Added go to the path",
            "Successfully set up Go version 1.19",
        ],
    ),
    "rust": (
        "dtolnay/rust-toolchain@stable",
        ["toolchain: stable"],
        [
            "##[group]rustup toolchain install stable --profile minimal",
            "info: syncing channel updates for 'stable-x86_64-unknown-linux-gnu'",
            "  stable-x86_64-unknown-linux-gnu unchanged - rustc 1.95.0 (59807616e 2026-03-18)",
            "##[endgroup]",
        ],
    ),
}


class _Clock:
    def __init__(self) -> None:
        self.now = datetime(2024, 5, 14, 9, 12, 1, 518000, tzinfo=UTC)

    def stamp(self, line: str) -> str:
        self.now += timedelta(microseconds=3217)
        return self.now.strftime("%Y-%m-%dT%H:%M:%S.%f") + "0Z " + line


def _step(title: str, header: list[str], output: list[str]) -> list[str]:
    return [f"##[group]Run {title}", *header, "##[endgroup]", *output]


def _script(command: str, env: dict[str, str]) -> list[str]:
    lines = [f"{ESC}[36;1m{line}{ESC}[0m" for line in command.splitlines()]
    lines.append("shell: /usr/bin/bash -e {0}")
    if env:
        lines += ["env:", *(f"  {k}: {v}" for k, v in env.items())]
    return lines


def actions_log(
    command: str,
    output: str,
    exit_code: int = 1,
    *,
    toolchain: str = "python",
    before: Sequence[tuple[str, str]] = (),
    repo: str = "octo-org/example",
) -> str:
    """A job log whose step `command` printed `output` and exited `exit_code`; `before` are
    earlier (passing) `run` steps as (command, output)."""
    action, inputs, setup_output = SETUP[toolchain]
    env = (
        {"pythonLocation": "/opt/hostedtoolcache/Python/3.12.3/x64"}
        if toolchain == "python"
        else {}
    )
    lines = [
        "Current runner version: '2.316.1'",
        "##[group]Operating System",
        "Ubuntu",
        "22.04.4",
        "LTS",
        "##[endgroup]",
        "##[group]Runner Image",
        "Image: ubuntu-22.04",
        "Version: 20240506.1.0",
        "##[endgroup]",
        "##[group]GITHUB_TOKEN Permissions",
        "Contents: read",
        "Metadata: read",
        "##[endgroup]",
        "Secret source: Actions",
        "Prepare workflow directory",
        "Prepare all required actions",
        "Getting action download info",
        "Download action repository 'actions/checkout@v4' "
        "(SHA:0ad4b8fadaa221de15dcec353f45205ec38ea70b)",
        "Complete job name: check",
    ]
    name = repo.split("/")[-1]
    lines += _step(
        "actions/checkout@v4",
        ["with:", f"  repository: {repo}", "  token: ***", "  fetch-depth: 1", "  lfs: false"],
        [
            f"Syncing repository: {repo}",
            "##[group]Getting Git version info",
            f"Working directory is '/home/runner/work/{name}/{name}'",
            "[command]/usr/bin/git version",
            "git version 2.45.1",
            "##[endgroup]",
            "##[group]Checking out the ref",
            "[command]/usr/bin/git checkout --progress --force refs/remotes/pull/7/merge",
            "HEAD is now at 3f5a2b1 Merge 9c1e0d2 into 41b7aa8",
            "##[endgroup]",
        ],
    )
    lines += _step(action, ["with:", *(f"  {i}" for i in inputs)], setup_output)
    for earlier, earlier_output in before:
        lines += _step(earlier, _script(earlier, env), earlier_output.splitlines())
    lines += _step(command.splitlines()[0], _script(command, env), output.splitlines())
    if exit_code:
        lines.append(f"##[error]Process completed with exit code {exit_code}.")
    lines += [
        "Post job cleanup.",
        "[command]/usr/bin/git version",
        "git version 2.45.1",
        "Cleaning up orphan processes",
    ]
    clock = _Clock()
    return "\ufeff" + "\n".join(clock.stamp(line) for line in lines) + "\n"
