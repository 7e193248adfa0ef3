"""The sandbox interface every backend implements: limits, exec results, start/exec/stop."""

from __future__ import annotations

import abc
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self

from tasks.sandbox.disk import Unmeasurable, disk_usage, files_owner

# chown_tree and TailBuffer are re-exported: the backends import them from here
from tasks.sandbox.disk import chown_tree as chown_tree
from tasks.sandbox.tail import TailBuffer as TailBuffer

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

log = logging.getLogger(__name__)

WORKDIR = "/workspace"
TMP = "/tmp"  # noqa: S108 - the sandbox's own private tmpfs, not the host's
# The environment every command starts from; the caller's `env` is laid over it.
BASE_ENV: Mapping[str, str] = {
    "HOME": TMP,
    "LANG": "C.UTF-8",
    "TMPDIR": TMP,
    "CI": "true",
    "GIT_TERMINAL_PROMPT": "0",
    "PIP_NO_INPUT": "1",
}
_SECRET_NAME = re.compile(r"^ONLOOP_|TOKEN|SECRET|PASSWORD|PASSWD|PRIVATE_KEY|CREDENTIAL", re.I)
_SECRET_VALUE = re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})")


class SandboxError(RuntimeError):
    """The sandbox could not be started or used (not: the command failed)."""


class DiskLimitExceeded(SandboxError):
    """The sandbox wrote more than its disk limit, so it was stopped; says so in words."""

    def __init__(self, limit_mb: int) -> None:
        self.message = (
            f"the job's workspace grew past {limit_mb} MB (ONLOOP_SANDBOX_DISK_LIMIT_MB), so "
            "onloop stopped its sandbox; ask the operator for a larger limit, or write less"
        )
        super().__init__(self.message)


@dataclass(frozen=True)
class Limits:
    """What one job's sandbox may use. Times are wall-clock seconds."""

    memory_mb: int = 2048
    cpus: float = 1.0
    pids: int = 256
    command_timeout: float = 600.0
    job_timeout: float = 3600.0
    tmp_mb: int = 512
    uid: int = 1000
    gid: int = 1000
    output_bytes: int = 1_000_000  # per stream; the tail is kept
    disk_mb: int = 4096  # the workspace (and Docker's writable layer); 0: unchecked
    disk_check_seconds: float = 10.0  # at least; longer when measuring takes long

    def clip(self, timeout: float | None, remaining: float) -> float:
        """The timeout one command gets: its own, or the default, never past the job's end."""
        return max(0.0, min(timeout if timeout is not None else self.command_timeout, remaining))


@dataclass
class ExecResult:
    """What one command did. `exit_code` is -1 when it was killed for time."""

    exit_code: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    duration: float = 0.0
    truncated: bool = False

    @property
    def ok(self) -> bool:
        """True when the command ran to the end and exited 0."""
        return self.exit_code == 0 and not self.timed_out

    @property
    def output(self) -> str:
        """stdout and stderr, one after the other."""
        return self.stdout + self.stderr


def check_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """The environment for one command; refuses anything that looks like a credential."""
    out = dict(BASE_ENV)
    for key, value in (env or {}).items():
        if _SECRET_NAME.search(key) or _SECRET_VALUE.search(value):
            raise ValueError(f"refusing to pass {key!r} into the sandbox: it looks like a secret")
        out[key] = value
    return out


def argv(cmd: str | Sequence[str]) -> list[str]:
    """A shell string runs under `sh -c`; a sequence is the argv itself."""
    if isinstance(cmd, str):
        return ["/bin/sh", "-c", cmd]
    if not cmd:
        raise ValueError("empty command")
    return list(cmd)


class Sandbox(abc.ABC):
    """One job's sandbox: run commands in it, then stop it (always; use it as a context)."""

    backend_name = "?"

    def __init__(self, job_id: int, workspace: Path, limits: Limits) -> None:
        self.job_id = job_id
        self.workspace = workspace
        self.limits = limits
        self.started = time.monotonic()
        self.deadline = self.started + limits.job_timeout
        self.stopped = False
        self.overflow = False  # stopped by the disk watch
        # Told of every command and its result (the audit log); never of the environment.
        self.observers: list[Callable[[list[str], ExecResult], None]] = []
        # Told of a command before it runs and of its output as it comes (the job page).
        self.starting: list[Callable[[list[str]], None]] = []
        self.streams: list[Callable[[str, bytes], None]] = []  # (stdout | stderr, chunk)
        self._halt = threading.Event()  # set by `stop`: ends the disk watch
        self._disk_watch: threading.Thread | None = None

    @property
    def remaining(self) -> float:
        """Seconds left of the job's wall-clock budget."""
        return self.deadline - time.monotonic()

    def exec(
        self,
        cmd: str | Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str = WORKDIR,
    ) -> ExecResult:
        """Run one command; it is killed after `timeout` or at the job's deadline, and the
        sandbox is stopped (DiskLimitExceeded) when it writes past the disk limit."""
        if self.stopped:
            if self.overflow:
                self._overflowed()
            raise SandboxError(f"sandbox for job {self.job_id} is stopped")
        self._watch_disk()
        environment = check_env(env)
        budget = self.limits.clip(timeout, self.remaining)
        if budget <= 0:
            self.stop()
            return ExecResult(-1, stderr="job time limit reached", timed_out=True)
        args = argv(cmd)
        for begin in self.starting:
            try:
                begin(args)
            except Exception:
                log.warning("sandbox exec observer failed", exc_info=True)
        # Imported here, not above: this package stays importable with the standard library
        # alone (the disk watch's test measures as another uid, with no site-packages).
        from opentelemetry import trace

        from app.core.tracing import span

        # OpenTelemetry's global provider: a no-op unless the worker turned traces on.
        tracer = trace.get_tracer("onloop.sandbox")
        # argv[0] alone: the arguments and the environment may hold what a span must not.
        attributes: dict[str, AttributeValue] = {
            "onloop.sandbox.program": args[0],
            "onloop.job.id": self.job_id,
        }
        with span(tracer, "sandbox.exec", attributes) as current:
            try:
                result = self._exec(args, budget, environment, workdir)
            except SandboxError:
                if self.overflow:  # stopped under the command for its disk use
                    self._overflowed()
                raise
            current.set_attribute("onloop.sandbox.exit_code", result.exit_code)
            current.set_attribute("onloop.sandbox.timed_out", result.timed_out)
        for observe in self.observers:
            try:
                observe(args, result)
            except Exception:
                log.warning("sandbox exec observer failed", exc_info=True)
        if self.overflow:
            self._overflowed()
        return result

    def stream(self, name: str, data: bytes) -> None:
        """A chunk of a running command's output on stream `name` (stdout, stderr), for
        `streams` (the backends' buffers call it)."""
        for listener in self.streams:
            listener(name, data)

    def _overflowed(self) -> None:
        """DiskLimitExceeded, once the watch has finished stopping the sandbox."""
        if self._disk_watch is not None and self._disk_watch is not threading.current_thread():
            self._disk_watch.join(60)
        raise DiskLimitExceeded(self.limits.disk_mb) from None

    def used_bytes(self) -> int:
        """What the sandbox has written to disk: its workspace (Docker adds its own layer)."""
        return disk_usage(self.workspace, files_owner(self.limits.uid))

    def _watch_disk(self) -> None:
        """Start the disk watch (once, at the first command)."""
        if self._disk_watch is not None or self.limits.disk_mb <= 0:
            return
        self._disk_watch = threading.Thread(target=self._disk_loop, daemon=True)
        self._disk_watch.start()

    def _disk_loop(self) -> None:
        limit, every = self.limits.disk_mb * 2**20, self.limits.disk_check_seconds
        wait, failed = every, False
        while not self._halt.wait(wait) and not self.stopped:
            begun = time.monotonic()
            try:
                used = self.used_bytes()
            except Unmeasurable:  # hidden from the count: taken as past the limit
                log.warning("job %s hid part of its workspace from the disk watch", self.job_id)
                used = limit + 1
            except Exception:
                log.log(
                    logging.DEBUG if failed else logging.WARNING,
                    "could not measure job %s's disk use",
                    self.job_id,
                    exc_info=True,
                )
                failed = True
                continue
            if used > limit:
                log.warning("job %s wrote %d bytes, past its disk limit", self.job_id, used)
                self.overflow = True
                self.stop()
                return
            wait = max(every, 10 * (time.monotonic() - begun))  # measuring costs little

    @abc.abstractmethod
    def _exec(
        self, args: list[str], timeout: float, env: dict[str, str], workdir: str
    ) -> ExecResult: ...

    @abc.abstractmethod
    def stop(self) -> None:
        """Kill everything in the sandbox and remove it. Safe to call twice."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class SandboxBackend(abc.ABC):
    """Starts sandboxes of one kind. `limitations` lists what this kind cannot enforce."""

    name = "?"
    limitations: tuple[str, ...] = ()

    @abc.abstractmethod
    def start(
        self,
        job_id: int,
        image: str,
        workspace: Path,
        limits: Limits | None = None,
        *,
        writable_root: bool = False,
    ) -> Sandbox:
        """A running sandbox for `job_id` with `workspace` mounted at /workspace.

        `writable_root` is for building warm snapshots only: the root file system is then
        the container's own layer, so `setup` can install into it.
        """

    def warn_limitations(self, items: Iterable[str] | None = None) -> None:
        """Say plainly, in the log, what this backend does not enforce."""
        for item in items if items is not None else self.limitations:
            log.warning("sandbox backend %r cannot enforce: %s", self.name, item)
