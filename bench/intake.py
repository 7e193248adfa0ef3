"""Intake benchmark: N signed deliveries at fixed concurrency through gunicorn on loopback,
onloop's webhook on SQLite and on PostgreSQL against a bare HMAC-only Flask endpoint, all
measured in the same run, each database as a ratio to the bare endpoint.

    python bench/intake.py [--requests 3000] [--concurrency 16] [--rounds 3]
        [--database-url postgresql+psycopg://user@host/db]

SQLite always runs (a new file); `--database-url` adds PostgreSQL (its tables are migrated
and its rows kept: each run's comments are new). A SQLite URL replaces the new file. onloop's
servers get a Redis of their own, as in production (metrics, the outbox bell).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.doubles.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT.parent / "shared" / "fixtures" / "webhooks" / "issue_comment.created.json"
SECRET = "bench-secret-" + uuid.uuid4().hex
TARGET_RPS = {"sqlite": 300, "postgresql": 1000}  # issue 20: PostgreSQL at full speed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/healthz")
            conn.getresponse().read()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("server did not start")


def bodies(n: int, repositories: int = 1) -> list[bytes]:
    base = json.loads(FIXTURE.read_text())
    base["issue"]["pull_request"] = {"url": "https://api.github.com/repos/x/y/pulls/1"}
    base["installation"] = {"id": 1}
    out = []
    base["comment"]["body"] = "/agent help"
    # Fresh, or intake ignores the comment as a replay (app.intake.freshness).
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    base["comment"]["created_at"] = base["comment"]["updated_at"] = now
    first = 10_000 + uuid.uuid4().int % 10**12  # new in every run: a database may be reused
    name = base["repository"]["full_name"]
    for i in range(n):  # a new comment each: every delivery creates its job
        base["comment"]["id"] = first + i
        base["repository"]["full_name"] = f"{name}{i % repositories}" if repositories > 1 else name
        out.append(json.dumps(base).encode())
    return out


def requests(payloads: list[bytes], port: int) -> list[bytes]:
    """Whole signed HTTP requests, built before the clock starts; every GUID is new."""
    out = []
    for body in payloads:
        sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        head = (
            f"POST /webhooks/github HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"X-GitHub-Event: issue_comment\r\nX-GitHub-Delivery: {uuid.uuid4()}\r\n"
            f"X-Hub-Signature-256: {sig}\r\n\r\n"
        )
        out.append(head.encode() + body)
    return out


def _exchange(sock: socket.socket, reader: Any, request: bytes) -> int:
    """Send one request on a keep-alive connection and read the whole answer; its status."""
    sock.sendall(request)
    status = int(reader.readline().split(b" ", 2)[1])
    length = 0
    while (line := reader.readline()) not in (b"\r\n", b""):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    reader.read(length)
    return status


def run_load(port: int, reqs: list[bytes], concurrency: int) -> tuple[list[float], float]:
    """`concurrency` keep-alive connections, each sending its next request when answered.

    A minimal HTTP/1.1 client (pre-built requests, buffered reads) so the load generator
    takes as little of the shared CPUs as it can; both servers get exactly the same one.
    """
    latencies: list[float] = []
    lock = threading.Lock()
    index = iter(range(len(reqs)))
    errors: list[str] = []
    clock = time.perf_counter

    def worker() -> None:
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = sock.makefile("rb")
        mine = []
        try:
            while (i := next(index, None)) is not None:  # next() on a range iterator is atomic
                start = clock()
                status = _exchange(sock, reader, reqs[i])
                mine.append(clock() - start)
                if status != 202:
                    errors.append(str(status))
        finally:
            reader.close()
            sock.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise SystemExit(f"{len(errors)} deliveries were not answered 202: {errors[:5]}")
    if len(latencies) != len(reqs):
        raise SystemExit(f"only {len(latencies)} of {len(reqs)} deliveries were answered")
    return latencies, elapsed


def serve(cmd: list[str], env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    wait_for(port, proc)
    return proc


def summary(name: str, runs: list[tuple[list[float], float]]) -> dict[str, float]:
    """Per-round p50, p99 and rate, and their medians over the rounds."""
    rounds = []
    for latencies, elapsed in runs:
        q = statistics.quantiles(latencies, n=100)
        rounds.append({"p50": q[49] * 1000, "p99": q[98] * 1000, "rps": len(latencies) / elapsed})
    stats = {k: statistics.median(r[k] for r in rounds) for k in ("p50", "p99", "rps")}
    each = "  ".join(f"{r['p99']:.1f}" for r in rounds)
    print(
        f"{name:>10}: p50 {stats['p50']:.2f} ms  p99 {stats['p99']:.2f} ms  {stats['rps']:.0f}/s"
        + (f"   (p99 per round: {each})" if len(rounds) > 1 else "")
    )
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000, help="deliveries per round")
    parser.add_argument("--concurrency", type=int, default=16, help="connections at once")
    parser.add_argument("--database-url", default=None, help="PostgreSQL (or a SQLite file)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (medians)")
    parser.add_argument("--workers", type=int, default=None, help="ONLOOP_WEB_WORKERS, both")
    parser.add_argument("--threads", type=int, default=None, help="ONLOOP_WEB_THREADS, both")
    parser.add_argument(
        "--repositories",
        type=int,
        default=1,
        help="deliveries spread over this many repositories (1: one busy repository)",
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="onloop-bench-"))
    redis = RedisServer(tmp).start()
    databases = {"sqlite": f"sqlite:///{tmp}/bench.db"}
    if args.database_url:
        databases["sqlite" if args.database_url.startswith("sqlite") else "postgresql"] = (
            args.database_url
        )
    env = {
        **os.environ,
        "ONLOOP_WEBHOOK_SECRET": SECRET,
        "ONLOOP_ACCESS_LOG": "0",
        "ONLOOP_LOG_LEVEL": "WARNING",
        "ONLOOP_APP_ID": "1",
        "ONLOOP_APP_SLUG": "bench",
        "ONLOOP_PRIVATE_KEY_PATH": str(tmp / "unused.pem"),
        "ONLOOP_CLIENT_ID": "bench",
        "ONLOOP_CLIENT_SECRET": "bench",
        "ONLOOP_SECRET_KEY": "bench-" + uuid.uuid4().hex,
        "ONLOOP_REDIS_URL": redis.url,
    }
    # The same gunicorn settings (config/gunicorn.conf.py) for both servers.
    if args.workers is not None:
        env["ONLOOP_WEB_WORKERS"] = str(args.workers)
    if args.threads is not None:
        env["ONLOOP_WEB_THREADS"] = str(args.threads)
    envs = {"bare": env} | {db: env | {"ONLOOP_DATABASE_URL": u} for db, u in databases.items()}
    for db in databases:
        subprocess.run(
            [sys.executable, "-m", "app.cli", "db", "upgrade"],
            env=envs[db],
            cwd=ROOT,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    n = args.requests
    payloads = bodies(200 + n * args.rounds, args.repositories)
    warm, rounds = (
        payloads[:200],
        [payloads[200 + r * n : 200 + (r + 1) * n] for r in range(args.rounds)],
    )
    names = ["bare", *databases]
    ports = {name: free_port() for name in names}
    gunicorn = [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.conf.py", "-b"]
    servers = {"bare": [*gunicorn, f"127.0.0.1:{ports['bare']}", "bench.bare_app:app"]}
    for db in databases:
        servers[db] = [sys.executable, "-m", "app.cli", "web", "--bind", f"127.0.0.1:{ports[db]}"]
    runs: dict[str, list[tuple[list[float], float]]] = {name: [] for name in names}
    procs = {}
    try:
        for name in names:
            procs[name] = serve(servers[name], envs[name], ports[name])
            run_load(ports[name], requests(warm, ports[name]), args.concurrency)  # warm-up
        for batch in rounds:  # alternate, so drift in the machine hits all alike
            for name in names:
                reqs = requests(batch, ports[name])
                runs[name].append(run_load(ports[name], reqs, args.concurrency))
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            proc.wait(timeout=20)
        redis.stop()
    print(
        f"concurrency {args.concurrency}, {args.requests} deliveries x {args.rounds} rounds,"
        f" over {args.repositories} repositor{'y' if args.repositories == 1 else 'ies'}"
    )
    results = {name: summary(name, runs[name]) for name in names}
    bare = results["bare"]
    for db in databases:
        mine = results[db]
        print(
            f"{db:>10}/bare: p99 ratio {mine['p99'] / bare['p99']:.2f} (target <= 2.0),"
            f" throughput ratio {mine['rps'] / bare['rps']:.2f},"
            f" {mine['rps']:.0f} durable deliveries/s (target >= {TARGET_RPS[db]}/s on 2 cores)"
        )


if __name__ == "__main__":
    main()
