"""Signed `/agent help` deliveries posted over HTTP, as GitHub posts them, and redelivered
(same GUID, same body) when they were not acknowledged, as `onloop redeliver` asks GitHub to."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

import requests

from app.intake.freshness import refreshed
from tests.doubles.webhooks import signed_headers

EVENT = "issue_comment"


@dataclass(frozen=True)
class Delivery:
    guid: str
    comment_id: int
    body: bytes


@dataclass
class Answer:
    guid: str
    status: int | None  # None: no answer (refused, cut, timed out)
    at: float  # time.time() when it came


def delivery(payload: dict[str, object], guid: str | None = None) -> Delivery:
    fresh = refreshed(payload, EVENT, datetime.now(UTC))
    comment = fresh["comment"]
    assert isinstance(comment, dict)
    return Delivery(guid or str(uuid.uuid4()), int(comment["id"]), json.dumps(fresh).encode())


@dataclass
class Sender:
    """Posts deliveries to `url` from a few threads and keeps every answer."""

    url: str
    threads: int = 8
    answers: list[Answer] = field(default_factory=list)
    sent: list[Delivery] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def note_sent(self, d: Delivery) -> None:
        with self._lock:
            self.sent.append(d)

    def note(self, answer: Answer) -> Answer:
        with self._lock:
            self.answers.append(answer)
        return answer

    def post(self, d: Delivery, *, first: bool = True) -> Answer:
        if first:
            self.note_sent(d)
        try:
            status: int | None = requests.post(
                f"{self.url}/webhooks/github",
                data=d.body,
                headers=signed_headers(d.body, EVENT, d.guid),
                timeout=30,
            ).status_code
        except requests.RequestException:
            status = None
        return self.note(Answer(d.guid, status, time.time()))

    def send(self, deliveries: Iterable[Delivery], rate: float | None = None) -> None:
        """Post each delivery once, `rate` a second (or as fast as the threads go)."""
        start = time.monotonic()
        with ThreadPoolExecutor(self.threads) as pool:
            for i, d in enumerate(deliveries):
                if rate:
                    time.sleep(max(0.0, start + i / rate - time.monotonic()))
                pool.submit(self.post, d)

    def unacknowledged(self) -> list[Delivery]:
        acked = self.acknowledged_guids()
        return list({d.guid: d for d in self.sent if d.guid not in acked}.values())

    def redeliver(self, rounds: int = 20, pause: float = 1.0) -> None:
        """Post every unacknowledged delivery again until each has a 2xx (or `rounds` pass)."""
        for _ in range(rounds):
            missing = self.unacknowledged()
            if not missing:
                return
            with ThreadPoolExecutor(self.threads) as pool:
                list(pool.map(lambda d: self.post(d, first=False), missing))
            time.sleep(pause)

    def acknowledged_guids(self) -> set[str]:
        with self._lock:
            return {a.guid for a in self.answers if a.status is not None and a.status < 300}

    def refused(self) -> list[Answer]:
        with self._lock:
            return [a for a in self.answers if a.status is None or a.status >= 300]

    def last_answer(self) -> float:
        with self._lock:
            return max(a.at for a in self.answers)
