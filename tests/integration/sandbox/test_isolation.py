"""What a job can do from inside the sandbox, on both backends: the non-negotiable rules."""

from __future__ import annotations

import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tasks.sandbox.base import Limits, SandboxError
from tests.doubles.sandboxes import StartFn

PROBE_NET = """
import socket, sys
for host, port in [("1.1.1.1", 53), ("127.0.0.1", int(sys.argv[1]))]:
    try:
        socket.create_connection((host, port), timeout=3).close()
        print("CONNECTED", host)
    except OSError as exc:
        print("refused", host, exc)
"""


def test_no_network(start: StartFn) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    try:
        sb = start()
        res = sb.exec(["python3", "-c", PROBE_NET, str(port)])
        assert res.exit_code == 0, res
        assert "CONNECTED" not in res.stdout
        assert [line.split()[0] for line in res.stdout.splitlines()] == ["refused"] * 2
        ifaces = sb.exec("cat /proc/net/dev").stdout
        names = {line.split(":")[0].strip() for line in ifaces.splitlines()[2:]}
        assert names <= {"lo"}, names
    finally:
        listener.close()


def test_no_host_file_outside_the_workspace(start: StartFn, tmp_path: Path) -> None:
    marker = f"host-secret-{uuid.uuid4().hex}"
    (tmp_path / "outside.txt").write_text(marker)
    sb = start(files={"inside.txt": "hello"})
    assert sb.exec("cat /workspace/inside.txt").stdout == "hello"
    res = sb.exec(f"ls {tmp_path} /root /work /var/lib/docker /run/docker.sock")
    assert res.exit_code != 0
    assert "outside.txt" not in res.stdout
    assert sb.exec("ls /workspace").stdout.split() == ["inside.txt"]
    # Nowhere in the sandbox's file system (the system dirs are searched too, but quickly).
    grep = sb.exec(
        f"grep -rlsF {marker} / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev "
        "--exclude-dir=usr; echo done",
        timeout=120,
    )
    assert grep.stdout.strip().splitlines() == ["done"], grep


def test_writes_outside_the_workspace_fail(start: StartFn, tmp_path: Path) -> None:
    sb = start()
    for path in ("/x", "/etc/x", "/usr/x", "/usr/bin/x", "/var/x", "/opt/x", "/home/x"):
        res = sb.exec(["sh", "-c", f"echo pwned > {path}"])
        assert res.exit_code != 0, path
    name = f"onloop-scratch-{uuid.uuid4().hex}"
    ok = sb.exec(f"echo kept > /workspace/out.txt && echo scratch > /tmp/{name} && id -u")
    assert ok.exit_code == 0, ok
    assert ok.stdout.strip() != "0"  # never root
    assert (sb.workspace / "out.txt").read_text() == "kept\n"
    assert not any(p.name == name for p in Path("/tmp").iterdir())  # the sandbox's own /tmp


FORKS = """
import os, time
n = 0
try:
    while n < 10000:
        if os.fork() == 0:
            time.sleep(2)
            os._exit(0)
        n += 1
except OSError as exc:
    print("stopped after", n, exc.errno)
"""


def test_fork_bomb_is_stopped_by_the_pids_limit(start: StartFn) -> None:
    sb = start(Limits(pids=64, command_timeout=30))
    res = sb.exec(["python3", "-c", FORKS])
    assert "stopped after" in res.stdout, res
    assert int(res.stdout.split()[2]) < 64
    # The classic one, too: it must not take the host down, and stop must still work.
    bomb = sb.exec(["bash", "-c", ":(){ :|:& };:; sleep 2"], timeout=4)
    assert bomb.exit_code != 0 or bomb.timed_out or "fork" in bomb.stderr.lower(), bomb
    sb.stop()
    assert subprocess.run(["true"]).returncode == 0
    again = start().exec("echo carried on")
    assert again.stdout == "carried on\n"


HOG = """
chunks = []
for _ in range(48):
    chunks.append(b"x" * (32 << 20))
print("survived", len(chunks))
"""


def test_memory_hog_is_killed_by_the_memory_limit(start: StartFn, backend_name: str) -> None:
    sb = start(Limits(memory_mb=256, command_timeout=60))
    res = sb.exec(["python3", "-c", HOG])
    assert "survived" not in res.stdout
    assert res.exit_code != 0
    if backend_name == "docker":
        assert res.exit_code == 137  # SIGKILL from the cgroup's OOM killer
    else:
        assert "MemoryError" in res.stderr
    assert sb.exec("echo alive").stdout == "alive\n"


def test_endless_loop_is_stopped_by_the_command_timeout(start: StartFn) -> None:
    sb = start(Limits(command_timeout=60))
    res = sb.exec("while :; do :; done", timeout=2)
    assert res.timed_out and not res.ok
    assert "timed out" in res.stderr
    # Background children of the command go too, and the sandbox still works.
    res = sb.exec("sleep 300 & while :; do :; done", timeout=2)
    assert res.timed_out
    assert sb.exec("echo alive").stdout == "alive\n"
    assert "sleep 300" not in sb.exec("ps -eo args").stdout


def test_job_timeout_ends_the_sandbox(
    start: StartFn, backend_name: str, request: pytest.FixtureRequest
) -> None:
    sb = start(Limits(job_timeout=3, command_timeout=60))
    res = sb.exec("sleep 60")
    assert res.timed_out
    deadline = time.monotonic() + 15
    while not sb.stopped and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sb.stopped
    with pytest.raises(SandboxError):
        sb.exec("true")
    if backend_name == "docker":
        from tests.doubles.sandboxes import job_containers

        client = request.getfixturevalue("docker_client")
        while job_containers(client, sb.job_id) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not job_containers(client, sb.job_id)


def test_secrets_are_refused_and_the_environment_is_clean(
    start: StartFn, monkeypatch: pytest.MonkeyPatch, token: str
) -> None:
    monkeypatch.setenv("ONLOOP_SECRET_KEY", "worker-secret-value")
    monkeypatch.setenv("GITHUB_TOKEN", token)
    sb = start()
    env = sb.exec("env").stdout
    assert "ONLOOP_" not in env and token not in env and "worker-secret-value" not in env
    for bad in ({"ONLOOP_SECRET_KEY": "x"}, {"GITHUB_TOKEN": "x"}, {"FOO": token}):
        with pytest.raises(ValueError):
            sb.exec("env", env=bad)
    assert sb.exec("echo $FOO", env={"FOO": "bar"}).stdout == "bar\n"
