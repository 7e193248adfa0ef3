"""One job's sandbox from trigger to first command: mirror, workspace, snapshot, pool, start."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import docker.errors

from tasks.git.process import TokenLike
from tasks.git.repo_cache import RepoCache
from tasks.sandbox.base import ExecResult, Limits, Sandbox, SandboxBackend, SandboxError
from tasks.sandbox.docker_backend import DockerBackend, DockerSandbox, exec_ids
from tasks.sandbox.egress.gateway import EgressGateway, EgressPolicy, Refusal, refusal_message
from tasks.sandbox.pool import PoolSlot, WarmPool
from tasks.sandbox.reaper import remove_tree
from tasks.sandbox.snapshots import DEPENDENCY_FILES, SnapshotStore
from tasks.sandbox.teardown import Teardown
from tasks.sandbox.trust import HeadTrust

log = logging.getLogger(__name__)
# uid:gid that owns the image's tool directories (/opt/venv): a snapshot's setup installs as
# that user, so no job, which runs as the sandbox user, can rewrite what is on its PATH.
SETUP_USER_LABEL = "onloop.sandbox.setup-user"


class SetupFailed(SandboxError):
    """The repository's `sandbox.setup` command failed; `result` says how, `refused` which
    connections the egress proxy refused meanwhile (`hint` says it in words)."""

    def __init__(self, result: ExecResult, refused: Sequence[Refusal] = ()) -> None:
        super().__init__(f"setup failed with exit code {result.exit_code}")
        self.result = result
        self.refused = list(refused)
        self.advice = ""  # what to do about them, when the job says more than the default

    @property
    def hint(self) -> str:
        """The refusals in words, for the status comment and check run ('' if none)."""
        return refusal_message(self.refused, self.advice)


@dataclass
class JobSandbox:
    """What `job_sandbox` hands the job."""

    sandbox: Sandbox
    workspace: Path
    sha: str
    image: str  # the image the sandbox runs: the base or the warm snapshot
    setup: ExecResult | None  # the setup this job ran; None when skipped or there is none
    snapshot: str | None
    pooled: bool  # a warm pool container
    primed: bool  # ...whose workspace held this repository already
    refused: list[Refusal] = field(default_factory=list)  # by the egress proxy during setup


@contextlib.contextmanager
def job_sandbox(
    backend: SandboxBackend,
    cache: RepoCache,
    *,
    job_id: int,
    repo: str,
    clone_url: str,
    rev: str,
    image: str,
    workspace_root: Path,
    limits: Limits | None = None,
    token: TokenLike | None = None,
    refs: Sequence[str] = (),
    also: Sequence[str] = (),
    branch: str | None = None,
    setup: str | None = None,
    snapshots: SnapshotStore | None = None,
    pool: WarmPool | None = None,
    gateway: EgressGateway | None = None,
    egress: EgressPolicy | None = None,
    on_start: Callable[[Sandbox], object] | None = None,
    trust: HeadTrust = HeadTrust.TRUSTED,
    scope: str = "",
    teardown: Teardown | None = None,
) -> Iterator[JobSandbox]:
    """A started sandbox with `rev` of `repo` checked out at /workspace; always removed.

    The mirror is fetched only when it lacks `rev` or a commit in `also` (the token stays in
    the worker). With `setup` and `snapshots`, the first job for a dependency key runs setup
    in a writable container and commits it; later jobs start from that image and skip
    setup. With a `gateway` and a non-empty `egress` policy (Docker only), setup reaches the
    allowed registries through the gateway's proxy; everything after it runs with no network.
    Snapshots are keyed by `scope` (the installation) and `trust`; an untrusted head's setup
    runs on a read-only root and no snapshot is looked up or written for it. With `teardown`,
    the sandbox's removal and the pool's refill are handed to it (the job pushes first; its
    runner joins them before the job ends), else they are done before this returns.
    """
    limits = limits or Limits()
    commit = cache.commit(repo, rev, clone_url, token, refs=refs, also=also)
    run_image, key, need_setup = image, None, bool(setup)
    if not isinstance(backend, DockerBackend) or gateway is None or not egress:
        gateway = egress = None  # setup runs with no network, as every other command
    if trust is not HeadTrust.TRUSTED:
        snapshots = None  # nothing an untrusted head's setup did outlives its job
    if setup and snapshots is not None:
        keyed = setup if egress is None else f"{setup}\n# egress {egress.fingerprint()}"
        blobs = cache.dependency_blobs(repo, commit, DEPENDENCY_FILES)
        key = snapshots.key(image, keyed, blobs, scope=scope, trust=trust)
        found = snapshots.find(repo, key)
        if found:
            run_image, need_setup = found, False
    slot: PoolSlot | None = None
    if pool is not None and not need_setup:
        slot = pool.claim(run_image, limits, repo=repo)
    pooled = slot is not None
    primed = slot is not None and slot.repo == repo
    workspace = slot.workspace if slot else _fresh(workspace_root, job_id)
    sandbox: Sandbox | None = None
    setup_result: ExecResult | None = None
    refused: list[Refusal] = []
    try:
        if primed and slot is not None:  # only move the checkout to the commit (and origin)
            origin = None if slot.origin == clone_url else clone_url
            cache.refresh(repo, commit, workspace, branch=branch, origin_url=origin, also=also)
        else:
            cache.checkout(repo, commit, workspace, branch=branch, origin_url=clone_url)
        if need_setup and setup:
            setup_result, run_image, refused = _setup(
                backend,
                snapshots,
                job_id,
                repo,
                image,
                workspace,
                limits,
                setup,
                key,
                gateway,
                egress,
                on_start,
            )
        if slot is not None:
            sandbox, slot = slot.activate(job_id, limits), None
        else:
            sandbox = backend.start(job_id, run_image, workspace, limits)
        yield JobSandbox(
            sandbox=sandbox,
            workspace=workspace,
            sha=commit,
            image=run_image,
            setup=setup_result,
            snapshot=run_image if run_image != image else None,
            pooled=pooled,
            primed=primed,
            refused=refused,
        )
    finally:
        remove = functools.partial(_remove, sandbox, slot, workspace)
        if teardown is None:
            remove()
        else:
            teardown.add("sandbox-removal", remove)
        if pool is not None:  # for the next job
            refill = functools.partial(pool.after_job, cache, repo, commit, clone_url, run_image)
            refill() if teardown is None else teardown.add("pool-refill", refill)


def _remove(sandbox: Sandbox | None, slot: PoolSlot | None, workspace: Path) -> None:
    try:
        if sandbox is not None:
            sandbox.stop()
        if slot is not None:
            slot.discard()
    except Exception:  # the reaper removes what is left (tasks/sandbox/reaper.py)
        log.warning("could not remove a job's sandbox", exc_info=True)
    finally:
        remove_later(workspace)


def remove_later(workspace: Path) -> None:
    """Take the workspace out of the way now (a rename) and remove it in the background: a
    large tree takes seconds to delete, and the job's push comes after its sandbox. The name
    keeps its prefix, so the reaper (or the pool's sweep) finds it if this process dies."""
    gone = workspace.with_name(f"{workspace.name}_gone")
    try:
        os.rename(workspace, gone)
    except OSError:
        shutil.rmtree(workspace, ignore_errors=True)
        return
    threading.Thread(target=remove_tree, args=(gone,), name="onloop-rm", daemon=True).start()


def _fresh(root: Path, job_id: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"job-{job_id}-", dir=root))


def _setup(
    backend: SandboxBackend,
    snapshots: SnapshotStore | None,
    job_id: int,
    repo: str,
    image: str,
    workspace: Path,
    limits: Limits,
    setup: str,
    key: str | None,
    gateway: EgressGateway | None = None,
    egress: EgressPolicy | None = None,
    on_start: Callable[[Sandbox], object] | None = None,
) -> tuple[ExecResult, str, list[Refusal]]:
    """Run `setup`; with a snapshot store, in a writable container (as the image's setup
    user, see `setup_limits`) that is then committed; with a gateway, on the job's own
    network with the proxy as its only way out."""
    writable = snapshots is not None and key is not None
    if writable:
        limits = setup_limits(backend, image, limits)
    with contextlib.ExitStack() as stack:
        if gateway is not None and egress is not None and isinstance(backend, DockerBackend):
            uid, gid = exec_ids(limits)
            net = stack.enter_context(gateway.session(job_id, egress, uid, gid))
            box: Sandbox = backend.start(
                job_id,
                image,
                workspace,
                limits,
                writable_root=writable,
                network=net.network,
                mounts=net.mounts,
            )
            env, refusals = net.env, net.refused
        else:
            box = backend.start(job_id, image, workspace, limits, writable_root=writable)
            env, refusals = {}, list
        stack.callback(box.stop)  # before the network goes
        if on_start is not None:  # e.g. a cancel watch that may stop it mid-setup
            on_start(box)
        result = box.exec(setup, env=env)
        refused = refusals()
        if refused:
            log.info("job %s: %s", job_id, refusal_message(refused))
        if not result.ok:
            raise SetupFailed(result, refused)
        if not writable or not isinstance(box, DockerSandbox):
            return result, image, refused
        assert snapshots is not None and key is not None
        return result, snapshots.create(box, repo, key, image), refused
    raise AssertionError("unreachable")


def setup_limits(backend: SandboxBackend, image: str, limits: Limits) -> Limits:
    """`limits` with the user the image names for setup (SETUP_USER_LABEL), if it names one
    (and it is not root); else `limits` itself."""
    if not isinstance(backend, DockerBackend):
        return limits
    try:
        labels = backend.client.images.get(image).labels or {}
    except docker.errors.ImageNotFound:
        return limits
    found = re.fullmatch(r"(\d+):(\d+)", str(labels.get(SETUP_USER_LABEL, "")))
    if found is None or int(found[1]) == 0:
        return limits
    return dataclasses.replace(limits, uid=int(found[1]), gid=int(found[2]))
