"""Log lines from many processes and threads on one pipe, as in a container: each one whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PROCESSES, THREADS, RECORDS = 4, 4, 150

# One process of the web or the worker: onloop's logging on its stderr, several threads
# logging records long and short (a traceback-sized one is longer than a pipe write).
CHATTER = """
import random, sys, threading
from app.core.logs import configure_logging, get_logger
configure_logging("INFO", True)
log = get_logger("onloop.test.pipes")
def chatter(thread):
    sizes = random.Random(thread)
    for n in range(int(sys.argv[2])):
        log.info("test.pipes", proc=sys.argv[1], thread=thread, n=n,
                 padding="x" * sizes.choice([10, 900, 3900, 9000]))
threads = [threading.Thread(target=chatter, args=(t,)) for t in range(int(sys.argv[3]))]
for t in threads: t.start()
for t in threads: t.join()
"""


def _records(lines: list[bytes]) -> list[dict[str, Any]]:
    """Every line parsed (a glued or split one fails here), `log.part` lines joined back."""
    records: list[dict[str, Any]] = []
    parts: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        record = json.loads(line)
        if record["event"] != "log.part":
            records.append(record)
            continue
        assert len(line) <= 4096
        got = parts.setdefault(record["record"], [])
        got.append(record)
        if len(got) == record["parts"]:
            assert [p["part"] for p in got] == list(range(1, record["parts"] + 1))
            records.append(json.loads("".join(p["text"] for p in got)))
    return records


def test_lines_from_many_processes_on_one_pipe_stay_whole() -> None:
    read, write = os.pipe()
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHATTER, str(p), str(RECORDS), str(THREADS)],
            stderr=write,
            env=env,
        )
        for p in range(PROCESSES)
    ]
    os.close(write)
    lines = []
    with os.fdopen(read, "rb") as pipe:
        for line in pipe:  # a reader that lags (a log collector under load): the pipe fills
            lines.append(line)
            time.sleep(0.0002)
    assert [p.wait(timeout=60) for p in procs] == [0] * PROCESSES
    records = _records(lines)
    seen = {(r["proc"], r["thread"], r["n"]) for r in records}
    assert len(records) == len(seen) == PROCESSES * THREADS * RECORDS
    assert any(len(r["padding"]) == 9000 for r in records)
