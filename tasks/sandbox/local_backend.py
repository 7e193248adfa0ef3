"""The local sandbox for machines without Docker: every command in a fresh bubblewrap."""

from __future__ import annotations

import logging
import os
import resource
import shutil
import signal
import subprocess
import threading
import time
from functools import partial
from pathlib import Path

from tasks.sandbox.base import (
    TMP,
    WORKDIR,
    ExecResult,
    Limits,
    Sandbox,
    SandboxBackend,
    SandboxError,
    TailBuffer,
    chown_tree,
)

log = logging.getLogger(__name__)

PATH = "/opt/venv/bin:/opt/tools/bin:/usr/local/bin:/usr/bin:/bin"
_TOP = ("bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr")
_ETC = (
    "alternatives",
    "ca-certificates",
    "ssl/certs",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "python3",
    "python3.11",
)
ALWAYS = (
    "CPU share: there is no cgroup, so a command may use every core",
    "memory: RLIMIT_AS caps each process's address space, not the sandbox's resident total",
    "processes: RLIMIT_NPROC counts every process of the sandbox's uid on the host",
    "runtime: an alternative container runtime (e.g. runsc) is not used",
)
# Under a root worker every command goes through a first, root bubblewrap that sees the host
# (so it can reach workspaces below 0700 directories) and stages the workspace and rootfs at
# STAGE; the host's own setpriv then drops to the sandbox's uid and every capability, and a
# second, unprivileged bubblewrap builds the sandbox from STAGE. Nothing in the sandbox's
# root runs before the command, and the command starts with no capability at all.
STAGE = "/run/onloop-sandbox"
_STAGE_CAPS = tuple(
    arg for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP") for arg in ("--cap-add", cap)
)
# What bubblewrap mounts over in a read-only rootfs: it cannot create them there.
_MOUNT_POINTS = ("proc", "dev", "tmp", "workspace", "etc/passwd", "etc/group", "etc/hostname")
HOST_ROOT = "root file system: the host's /usr and a few /etc files are visible (read-only)"


class LocalSandbox(Sandbox):
    """A job's commands, each run by `bwrap` with no network and only the workspace writable."""

    backend_name = "local"

    def __init__(self, backend: LocalBackend, job_id: int, workspace: Path, limits: Limits) -> None:
        super().__init__(job_id, workspace, limits)
        self.backend = backend
        self._fds: dict[str, int] = {}
        self._procs: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()
        self._watchdog = threading.Timer(limits.job_timeout, self.stop)
        self._watchdog.daemon = True
        self._watchdog.start()

    def bwrap_args(self, args: list[str], env: dict[str, str], workdir: str) -> list[str]:
        """The command line for one command (fds from `open_fds`): bubblewrap, staged
        through the host's setpriv when the worker is root (see STAGE)."""
        b, lim = self.backend, self.limits
        workspace, rootfs = str(self.workspace), str(b.rootfs) if b.rootfs else None
        prefix: list[str] = []
        if b.setpriv is not None:
            workspace, rootfs = f"{STAGE}/ws", f"{STAGE}/root" if rootfs else None
            prefix = [b.bwrap, "--die-with-parent", "--dev-bind", "/", "/", "--tmpfs", STAGE]
            prefix += ["--bind", str(self.workspace), workspace]
            if b.rootfs is not None and rootfs is not None:
                prefix += ["--ro-bind", str(b.rootfs), rootfs]
            prefix += ["--cap-drop", "ALL", *_STAGE_CAPS, "--", b.setpriv]
            prefix += [f"--reuid={lim.uid}", f"--regid={lim.gid}", "--clear-groups"]
            prefix += ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
        cmd = [b.bwrap, "--die-with-parent", "--new-session", "--hostname", "sandbox"]
        cmd += ["--unshare-all", "--cap-drop", "ALL", "--uid", str(lim.uid)]
        cmd += ["--gid", str(lim.gid), "--clearenv"]
        if rootfs is not None:
            cmd += ["--ro-bind", rootfs, "/"]
        else:
            for top in _TOP:
                host = Path("/") / top
                if host.is_symlink():
                    cmd += ["--symlink", os.readlink(host), str(host)]
                elif host.is_dir():
                    cmd += ["--ro-bind", str(host), str(host)]
            cmd += ["--perms", "0755", "--dir", "/etc", "--perms", "0755", "--dir", "/etc/ssl"]
            for name in _ETC:
                cmd += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        for name in ("passwd", "group", "hostname"):
            cmd += ["--perms", "0644", "--ro-bind-data", str(self._fds[name]), f"/etc/{name}"]
        cmd += ["--proc", "/proc", "--dev", "/dev"]
        cmd += ["--size", str(lim.tmp_mb * 1024 * 1024), "--perms", "1777", "--tmpfs", TMP]
        cmd += ["--bind", workspace, WORKDIR, "--remount-ro", "/", "--chdir", workdir]
        for key, value in {"PATH": PATH, **env}.items():
            cmd += ["--setenv", key, value]
        return [*prefix, *cmd, "--", *args]

    def open_fds(self) -> dict[str, int]:
        """The sandbox's own /etc/passwd, group and hostname, as pipes bwrap reads."""
        lim = self.limits
        fds: dict[str, int] = {}
        files = {
            "passwd": f"root:x:0:0::/root:/bin/sh\nsandbox:x:{lim.uid}:{lim.gid}::/tmp:/bin/sh\n"
            "nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n",
            "group": f"root:x:0:\nsandbox:x:{lim.gid}:\nnogroup:x:65534:\n",
            "hostname": "sandbox\n",
        }
        for name, text in files.items():
            read, write = os.pipe()
            os.write(write, text.encode())
            os.close(write)
            fds[name] = read
        return fds

    def _limit(self) -> None:  # runs in the child, before exec
        lim = self.limits
        resource.setrlimit(resource.RLIMIT_NPROC, (lim.pids, lim.pids))
        memory = lim.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    def _spawn(self, args: list[str], env: dict[str, str], workdir: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self.bwrap_args(args, env, workdir),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=self._limit,  # only setrlimit calls
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            pass_fds=tuple(self._fds.values()),
        )

    def _exec(
        self, args: list[str], timeout: float, env: dict[str, str], workdir: str
    ) -> ExecResult:
        begun = time.monotonic()
        out = TailBuffer(self.limits.output_bytes, partial(self.stream, "stdout"))
        err = TailBuffer(self.limits.output_bytes, partial(self.stream, "stderr"))
        with self._lock:
            if self.stopped:
                raise SandboxError(f"sandbox for job {self.job_id} is stopped")
            self._fds = self.open_fds()
            try:
                proc = self._spawn(args, env, workdir)
            finally:
                for fd in self._fds.values():
                    os.close(fd)
            self._procs.add(proc)
        readers = [
            threading.Thread(target=buf.drain, args=(stream,), daemon=True)
            for buf, stream in ((out, proc.stdout), (err, proc.stderr))
        ]
        for reader in readers:
            reader.start()
        timed_out = False
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill(proc)
            proc.wait()
        for reader in readers:
            reader.join(10)
        with self._lock:
            self._procs.discard(proc)
            timed_out = timed_out or self.stopped  # killed at the job's deadline
        if timed_out:
            err.add(f"\nonloop: command timed out after {timeout:g}s\n".encode())
        code = -1 if timed_out else proc.returncode
        if code < 0 and not timed_out:
            code = 128 - code  # killed by a signal: report it the way a shell does
        return ExecResult(
            exit_code=code,
            stdout=out.text(),
            stderr=err.text(),
            timed_out=timed_out,
            duration=time.monotonic() - begun,
            truncated=out.truncated or err.truncated,
        )

    def stop(self) -> None:
        """Kill every command still running; nothing else outlives the sandbox."""
        with self._lock:
            if self.stopped:
                return
            self.stopped = True
            procs = list(self._procs)
        self._halt.set()
        self._watchdog.cancel()
        for proc in procs:
            _kill(proc)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class LocalBackend(SandboxBackend):
    """Sandboxes on bubblewrap. `rootfs`: the operator's unpacked image to use as the
    read-only root (ONLOOP_SANDBOX_ROOTFS); without it the host's own /usr is used, and that
    is listed in `limitations`. bwrap and setpriv are the host's, found here by absolute path."""

    name = "local"

    def __init__(self, rootfs: Path | None = None, *, bwrap: str | None = None) -> None:
        found = bwrap or shutil.which("bwrap")
        if not found:
            raise SandboxError("the local sandbox needs bubblewrap: apt-get install bubblewrap")
        self.bwrap = str(Path(found).resolve())
        self.setpriv: str | None = None
        if os.geteuid() == 0:
            setpriv = shutil.which("setpriv")
            if not setpriv:
                raise SandboxError(
                    "the local sandbox under a root worker needs setpriv to drop every "
                    "capability: apt-get install util-linux (or run the worker as a user)"
                )
            self.setpriv = str(Path(setpriv).resolve())
            stage = Path(STAGE)
            stage.mkdir(mode=0o755, parents=True, exist_ok=True)
            if stage.is_symlink() or stage.lstat().st_uid != 0:
                raise SandboxError(f"{STAGE} must be a directory that root owns")
            self._check_unprivileged()
        if rootfs is not None:
            rootfs = rootfs.resolve()
            missing = [name for name in _MOUNT_POINTS if not (rootfs / name).exists()]
            if not (rootfs / "usr").is_dir() or missing:
                raise SandboxError(
                    f"ONLOOP_SANDBOX_ROOTFS {rootfs} is not an unpacked image with the mount "
                    f"points the sandbox needs (missing: {', '.join(missing) or 'usr'})"
                )
        self.rootfs = rootfs
        self.limitations = ALWAYS if rootfs is not None else (*ALWAYS, HOST_ROOT)
        self.warn_limitations()

    def _check_unprivileged(self) -> None:
        """Under root, bubblewrap builds the sandbox as the sandbox's uid, in a user
        namespace: refuse to start (rather than keep capabilities) where that is refused."""
        assert self.setpriv is not None
        drop = [self.setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
        drop += ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
        probe = [self.bwrap, "--dev-bind", "/", "/", "--cap-drop", "ALL", *_STAGE_CAPS, "--"]
        probe += [*drop, self.bwrap, "--unshare-all", "--ro-bind", "/", "/", "--", "true"]
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30, check=False)
        if done.returncode != 0:
            raise SandboxError(
                "the local sandbox under a root worker builds each sandbox as an unprivileged "
                "user, which needs unprivileged user namespaces, and this machine refused "
                f"({done.stderr.strip()[-300:]}); allow them (user.max_user_namespaces, "
                "kernel.unprivileged_userns_clone) or run the worker as a non-root user"
            )

    def start(
        self,
        job_id: int,
        image: str,
        workspace: Path,
        limits: Limits | None = None,
        *,
        writable_root: bool = False,
    ) -> LocalSandbox:
        """A sandbox for `job_id`. `image` names a Docker image and is not used here: every
        job runs in the backend's one root (a repository never chooses a host directory)."""
        limits = limits or Limits()
        if limits.uid == 0:
            raise SandboxError("sandbox commands never run as root")
        if writable_root:
            raise SandboxError("the local sandbox cannot make warm snapshots")
        workspace = workspace.resolve()
        if not workspace.is_dir():
            raise SandboxError(f"workspace {workspace} is not a directory")
        if os.geteuid() == 0:
            chown_tree(workspace, limits.uid, limits.gid)
        return LocalSandbox(self, job_id, workspace, limits)
