"""A client that sends a signed delivery's body a piece at a time, holding a connection (and
the web thread reading it) for as long as it takes, then reads the answer."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

from tests.doubles.webhooks import signed_headers
from tests.faults.sender import EVENT, Answer, Delivery, Sender


def slow_post(sender: Sender, d: Delivery, seconds: float, pieces: int = 40) -> Answer:
    """POST `d` to the sender's web over `seconds`, in `pieces`; the answer, kept by it."""
    sender.note_sent(d)
    url = urlsplit(sender.url)
    headers = signed_headers(d.body, EVENT, d.guid)
    head = (
        "POST /webhooks/github HTTP/1.1\r\n"
        f"Host: {url.netloc}\r\n"
        + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        + f"Content-Length: {len(d.body)}\r\nConnection: close\r\n\r\n"
    )
    status: int | None = None
    try:
        with socket.create_connection((url.hostname, url.port), timeout=60) as conn:
            conn.sendall(head.encode())
            step = -(-len(d.body) // pieces)
            for i in range(0, len(d.body), step):
                conn.sendall(d.body[i : i + step])
                time.sleep(seconds / pieces)
            first = conn.makefile("rb").readline().decode(errors="replace").split()
            status = int(first[1]) if len(first) > 1 and first[1].isdigit() else None
    except OSError:
        status = None
    return sender.note(Answer(d.guid, status, time.time()))
