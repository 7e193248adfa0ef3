"""`onloop web` as real processes: half-sent requests on every thread, a killed master."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.doubles.dev_proc import stop_group
from tests.doubles.redis_server import free_port
from tests.doubles.webhooks import FIXTURES, signed_headers
from tests.integration.test_cli import clean_env, full_settings, onloop

ROOT = Path(__file__).resolve().parents[2]
WORKERS, THREADS = 2, 8
GITHUB_TIMEOUT = 10  # seconds GitHub waits for an answer to a delivery


def _start(
    env: dict[str, str], cwd: Path, port: int, log: Path | None = None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", "web", "--bind", f"127.0.0.1:{port}"],
        cwd=cwd,
        env=env | {"PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb") if log else subprocess.DEVNULL,
        start_new_session=True,  # its workers too are killed at the end, by the group
    )


def _wait_served(url: str, proc: subprocess.Popen[bytes], within: float = 30) -> float:
    """Seconds until `url`/healthz answers."""
    start = time.monotonic()
    while True:
        try:
            requests.get(url + "/healthz", timeout=1)
            return time.monotonic() - start
        except requests.RequestException:
            assert proc.poll() is None and time.monotonic() - start < within, "web not served"
            time.sleep(0.05)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


@pytest.fixture
def web_env(tmp_path: Path) -> dict[str, str]:
    env = clean_env(
        **full_settings(tmp_path),
        ONLOOP_WEB_WORKERS=str(WORKERS),
        ONLOOP_WEB_THREADS=str(THREADS),
        HOME=str(tmp_path / "home"),
    )
    (tmp_path / "home").mkdir()
    upgraded = onloop(["db", "upgrade"], tmp_path, env)
    assert upgraded.returncode == 0, upgraded.stderr
    return env


@pytest.fixture
def web(web_env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    port = free_port()
    proc = _start(web_env, tmp_path, port)
    url = f"http://127.0.0.1:{port}"
    _wait_served(url, proc)
    yield url
    _stop(proc)


HEAD = b"POST /webhooks/github HTTP/1.1\r\nHost: onloop\r\nContent-Length: 1000\r\n"
# What a stalled client sent before it stopped: nothing, half its headers, half its body.
HALVES = (b"", HEAD, HEAD + b'X-GitHub-Event: ping\r\n\r\n{"zen":')


def _half_sent(port: int, n: int) -> socket.socket:
    """A client that sent HALVES[n % 3] of a delivery, then stalls."""
    sock = socket.create_connection(("127.0.0.1", port))
    if HALVES[n % 3]:
        sock.sendall(HALVES[n % 3])
    return sock


def test_a_delivery_is_answered_while_every_thread_holds_a_half_sent_request(web: str) -> None:
    port = int(web.rsplit(":", 1)[1])
    # Four times the threads: however the workers share them out, each thread of each
    # worker gets one, and more wait in its queue.
    stalled = [_half_sent(port, n) for n in range(4 * WORKERS * THREADS)]
    time.sleep(1)  # every thread is waiting on one of them
    body = (FIXTURES / "ping.with-app_id.json").read_bytes()
    answer = requests.post(
        web + "/webhooks/github",
        data=body,
        headers=signed_headers(body, "ping"),
        timeout=GITHUB_TIMEOUT,
    )
    assert 200 <= answer.status_code < 300, answer.text
    # The stalled ones were let go: closed, or answered 400 when the view read the body.
    for n, sock in enumerate(stalled):
        sock.settimeout(GITHUB_TIMEOUT)
        got = sock.recv(4096)
        assert got.startswith(b"HTTP/1.1 400") if n % 3 == 2 else got == b"", (n, got)
        sock.close()


def test_a_chunked_delivery_is_read_to_its_end_and_a_short_one_refused(web: str) -> None:
    """POST /webhooks/github reads its body itself (app.web.webhooks): a chunked one (no
    Content-Length) to its last chunk, bounded; one shorter than its Content-Length, whose
    sender hung up, is answered 400 and not parsed."""
    body = (FIXTURES / "ping.with-app_id.json").read_bytes()
    headers = signed_headers(body, "ping")
    halves = iter((body[:100], body[100:]))  # a generator body: requests sends it chunked
    answer = requests.post(web + "/webhooks/github", data=halves, headers=headers, timeout=10)
    # Verified (a part missing would be a 401) and parsed: ignored, with why.
    assert answer.status_code == 204, answer.text
    assert answer.headers["X-Onloop-Outcome"].startswith("ignored"), answer.headers
    port = int(web.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        head = "POST /webhooks/github HTTP/1.1\r\nHost: onloop\r\n"
        head += f"Content-Length: {len(body) + 50}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        sock.sendall(head.encode() + body)
        sock.shutdown(socket.SHUT_WR)  # 50 bytes short, and no more to come
        got = sock.recv(4096)
    assert got.startswith(b"HTTP/1.1 400"), got


def test_two_web_instances_share_no_control_socket(
    web: str, web_env: dict[str, str], tmp_path: Path
) -> None:
    port = free_port()
    second = _start(web_env, tmp_path, port)
    try:
        _wait_served(f"http://127.0.0.1:{port}", second)
        assert requests.get(web + "/healthz", timeout=5).ok  # the first serves on
        home = Path(web_env["HOME"])
        assert not (home / ".gunicorn").exists(), list(home.rglob("*"))
    finally:
        _stop(second)


def test_a_killed_master_s_port_is_served_again_soon(
    web_env: dict[str, str], tmp_path: Path
) -> None:
    """What a supervisor (compose's restart, the kubelet, a systemd unit) sees after a
    SIGKILL of the master while a request is in flight: its orphaned workers let go of the
    port, the new master binds it and serves. Measured and printed; bounded only by
    GitHub's timeout."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    first = _start(web_env, tmp_path, port)
    _wait_served(url, first)
    in_flight = [_half_sent(port, n) for n in range(3 * WORKERS)]
    time.sleep(0.5)
    os.kill(first.pid, signal.SIGKILL)
    killed = time.monotonic()
    log = tmp_path / "second.log"
    second = _start(web_env, tmp_path, port, log)
    try:
        while b"Listening at" not in log.read_bytes():  # the new master holds the port
            assert second.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() - killed < 60
            time.sleep(0.05)
        _wait_served(url, second)
        took = time.monotonic() - killed
        print(json.dumps({"served_again_after_s": round(took, 2)}))
        assert took < GITHUB_TIMEOUT
    finally:
        for sock in in_flight:
            sock.close()
        _stop(second)
        _stop(first)


def _children(pid: int) -> list[int]:
    found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(c) for c in found]


def test_onloop_dev_starts_its_killed_web_again(tmp_path: Path) -> None:
    """`onloop dev`'s web half is its own process: killed, dev starts it again. Measured and
    printed; bounded only by GitHub's timeout."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    out = tmp_path / "dev.log"
    dev = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "dev", "--bind", f"127.0.0.1:{port}"],
        cwd=tmp_path,
        env=clean_env(PYTHONPATH=str(ROOT), HOME=str(tmp_path)),
        stdout=out.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _wait_served(url, dev, within=60)
        started = time.monotonic()
        while b"web ready on" not in out.read_bytes():  # dev knows its web is up: now kill it
            assert dev.poll() is None and time.monotonic() - started < 60, out.read_text()[-2000:]
            time.sleep(0.05)
        web = next(
            c
            for c in _children(dev.pid)
            if b"app.cli.devweb" in Path(f"/proc/{c}/cmdline").read_bytes()
        )
        listening = out.read_bytes().count(b"Listening at")
        os.kill(web, signal.SIGKILL)
        killed = time.monotonic()
        while out.read_bytes().count(b"Listening at") == listening:  # a new web holds the port
            assert dev.poll() is None and time.monotonic() - killed < 60, out.read_text()[-2000:]
            time.sleep(0.05)
        _wait_served(url, dev)
        took = time.monotonic() - killed
        print(json.dumps({"dev_web_served_again_after_s": round(took, 2)}))
        assert took < GITHUB_TIMEOUT
        assert b"the web exited" in out.read_bytes()
    finally:
        stop_group(dev)
