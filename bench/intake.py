"""Intake benchmark: N signed deliveries at fixed concurrency through gunicorn on loopback,
onloop's webhook against a bare HMAC-only Flask endpoint, measured in the same run.

    python bench/intake.py [--requests 3000] [--concurrency 16] [--database-url URL]
"""

from __future__ import annotations

import argparse
import copy
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

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT.parent / "shared" / "fixtures" / "webhooks" / "issue_comment.created.json"
SECRET = "bench-secret-" + uuid.uuid4().hex


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


def bodies(n: int) -> list[bytes]:
    base = json.loads(FIXTURE.read_text())
    base["issue"]["pull_request"] = {"url": "https://api.github.com/repos/x/y/pulls/1"}
    base["installation"] = {"id": 1}
    out = []
    for i in range(n):
        data = copy.deepcopy(base)
        data["comment"]["id"] = 10_000 + i
        data["comment"]["body"] = "/agent help"
        out.append(json.dumps(data).encode())
    return out


def run_load(port: int, payloads: list[bytes], concurrency: int) -> tuple[list[float], float]:
    latencies: list[float] = []
    lock = threading.Lock()
    index = iter(range(len(payloads)))
    errors: list[str] = []

    def worker() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine = []
        while True:
            with lock:
                i = next(index, None)
            if i is None:
                break
            body = payloads[i]
            sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
            headers = {
                "Content-Type": "application/json",
                "X-GitHub-Event": "issue_comment",
                "X-GitHub-Delivery": str(uuid.uuid4()),
                "X-Hub-Signature-256": sig,
            }
            start = time.perf_counter()
            conn.request("POST", "/webhooks/github", body=body, headers=headers)
            response = conn.getresponse()
            response.read()
            mine.append(time.perf_counter() - start)
            if response.status != 202:
                errors.append(str(response.status))
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
    return latencies, elapsed


def serve(cmd: list[str], env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    wait_for(port, proc)
    return proc


def summary(name: str, latencies: list[float], elapsed: float) -> dict[str, float]:
    q = statistics.quantiles(latencies, n=100)
    stats = {"p50": q[49] * 1000, "p99": q[98] * 1000, "rps": len(latencies) / elapsed}
    print(f"{name:>8}: p50 {stats['p50']:.2f} ms  p99 {stats['p99']:.2f} ms  {stats['rps']:.0f}/s")
    return stats


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="onloop-bench-"))
    db_url = args.database_url or f"sqlite:///{tmp}/bench.db"
    env = {
        **os.environ,
        "ONLOOP_WEBHOOK_SECRET": SECRET,
        "ONLOOP_DATABASE_URL": db_url,
        "ONLOOP_ACCESS_LOG": "0",
        "ONLOOP_LOG_LEVEL": "WARNING",
        "ONLOOP_APP_ID": "1",
        "ONLOOP_APP_SLUG": "bench",
        "ONLOOP_PRIVATE_KEY_PATH": str(tmp / "unused.pem"),
        "ONLOOP_CLIENT_ID": "bench",
        "ONLOOP_CLIENT_SECRET": "bench",
        "ONLOOP_SECRET_KEY": "bench-" + uuid.uuid4().hex,
    }
    subprocess.run(
        [sys.executable, "-m", "app.cli", "db", "upgrade"],
        env=env,
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    payloads = bodies(args.requests)
    results = {}
    bare_port, onloop_port = free_port(), free_port()
    servers = {
        "bare": [
            sys.executable,
            "-m",
            "gunicorn",
            "-c",
            "config/gunicorn.conf.py",
            "-b",
            f"127.0.0.1:{bare_port}",
            "bench.bare_app:app",
        ],
        "onloop": [sys.executable, "-m", "app.cli", "web", "--bind", f"127.0.0.1:{onloop_port}"],
    }
    ports = {"bare": bare_port, "onloop": onloop_port}
    for name in ("bare", "onloop"):
        proc = serve(servers[name], env, ports[name])
        try:
            run_load(ports[name], payloads[: min(200, len(payloads))], args.concurrency)  # warm-up
            latencies, elapsed = run_load(ports[name], payloads, args.concurrency)
            results[name] = summary(name, latencies, elapsed)
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    ratio = results["onloop"]["p99"] / results["bare"]["p99"]
    print(f"onloop/bare p99 ratio: {ratio:.2f} (target <= 2.0)")
    print(f"onloop/bare throughput ratio: {results['onloop']['rps'] / results['bare']['rps']:.2f}")
    print(f"onloop throughput: {results['onloop']['rps']:.0f}/s (target >= 300/s on 2 cores)")


if __name__ == "__main__":
    main()
