"""Git in the worker with a token handed to that one git process alone, never left on disk."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from opentelemetry import trace

from app.core.tracing import span

USERNAME = "x-access-token"
TOKEN_VAR = "ONLOOP_GIT_ASKPASS_TOKEN"  # noqa: S105 - a variable's name, not a secret
USER_VAR = "ONLOOP_GIT_ASKPASS_USER"
ASKPASS = f"""#!/bin/sh
# onloop's GIT_ASKPASS: answers git's prompts from this git process's own environment.
case "$1" in
  Username*) printf '%s\\n' "${{{USER_VAR}:-{USERNAME}}}" ;;
  *) printf '%s\\n' "${TOKEN_VAR}" ;;
esac
"""
# Passed to every git run: nothing a repository's own config says can run code or reroute
# credentials while a token is in the environment.
HARDENING = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "credential.helper=",
    "-c",
    "core.askPass=",
    "-c",
    "protocol.ext.allow=never",
    "-c",
    "gc.autoDetach=false",
)
_PASS_THROUGH = (
    "PATH",
    "LANG",
    "LC_ALL",
    "TZ",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "GIT_SSL_CAINFO",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)
# Git's options that take a value as the next argument (before the subcommand).
_VALUED_OPTIONS = frozenset({"-c", "-C", "--git-dir", "--work-tree", "--namespace"})
# OpenTelemetry's global provider, a no-op unless the worker turned traces on (app.core.tracing).
tracer = trace.get_tracer("onloop.git")
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^/@\s]+@", re.I)


@runtime_checkable
class Secret(Protocol):
    """A token object (app.github.clients.InstallationToken, UserToken): reveals itself on ask."""

    def secret(self) -> str: ...


TokenLike = Secret | str


class GitError(RuntimeError):
    """A git command failed; the message is already free of credentials."""

    def __init__(self, args: Sequence[str], returncode: int, output: str) -> None:
        super().__init__(f"git {' '.join(args)} failed ({returncode}): {output.strip()[-2000:]}")
        self.returncode = returncode
        self.output = output


_askpass_lock = threading.Lock()
_askpass_path: Path | None = None


def askpass_script() -> Path:
    """The askpass script (no secret in it), written once per process to a private dir."""
    global _askpass_path
    with _askpass_lock:
        if _askpass_path is None or not _askpass_path.exists():
            folder = Path(tempfile.mkdtemp(prefix="onloop-askpass-"))
            path = folder / "askpass.sh"
            path.write_text(ASKPASS)
            path.chmod(stat.S_IRWXU)
            _askpass_path = path
        return _askpass_path


def reveal(token: TokenLike | None) -> str | None:
    """The token's text, from a token object or a plain string."""
    if token is None:
        return None
    value = token if isinstance(token, str) else token.secret()
    if not value or "\n" in value:
        raise ValueError("a git token must be one non-empty line")
    return value


def redact(text: str, *secrets: str | None) -> str:
    """`text` without the given secrets and without credentials in any URL."""
    for value in secrets:
        if value:
            text = text.replace(value, "***")
    return _URL_CREDENTIALS.sub(r"\g<scheme>***@", text)


def check_url(arg: str) -> None:
    """Refuse a URL that carries credentials: the token goes through askpass only."""
    if _URL_CREDENTIALS.match(arg):
        raise ValueError(f"refusing a git URL with credentials in it: {redact(arg)}")


def git_env(token: str | None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A clean environment for one git process: no global or system config, no prompts."""
    env = {k: v for k, v in os.environ.items() if k in _PASS_THROUGH}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(
        {
            "HOME": "/nonexistent",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ASKPASS": str(askpass_script()),
            "SSH_ASKPASS": "/bin/false",
            "GIT_AUTHOR_NAME": "onloop",
            "GIT_AUTHOR_EMAIL": "onloop@localhost",
            "GIT_COMMITTER_NAME": "onloop",
            "GIT_COMMITTER_EMAIL": "onloop@localhost",
        }
    )
    env.update(extra or {})
    if token is not None:
        env[TOKEN_VAR] = token
    return env


def subcommand(args: Sequence[str]) -> str:
    """The git subcommand in `args` (`fetch`, `push`...): what a span may say of a git run,
    never its URLs or other arguments."""
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in _VALUED_OPTIONS:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return ""


def git(
    args: Sequence[str],
    cwd: Path | str | None = None,
    token: TokenLike | None = None,
    *,
    timeout: float = 600.0,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    input: str | None = None,
    config: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `git ARGS` in `cwd`. The token, if any, reaches only this process, through
    GIT_ASKPASS: never a URL, never git config. Output and errors are redacted."""
    secret = reveal(token)
    for arg in args:
        check_url(arg)
    extra_config: list[str] = []
    for key, value in (config or {}).items():
        extra_config += ["-c", f"{key}={value}"]
    cmd = ["git", *HARDENING, *extra_config, *args]
    with span(tracer, "git", {"git.subcommand": subcommand(args)}) as current:
        try:
            proc = subprocess.run(
                cmd,
                cwd=cwd,
                env=git_env(secret, env),
                input=input,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise GitError(args, -1, f"timed out after {timeout:g}s") from exc
        current.set_attribute("git.exit_code", proc.returncode)
    result = subprocess.CompletedProcess(
        list(args), proc.returncode, redact(proc.stdout, secret), redact(proc.stderr, secret)
    )
    if check and proc.returncode != 0:
        raise GitError(args, proc.returncode, result.stderr or result.stdout)
    return result
