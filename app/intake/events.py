"""A webhook delivery as data: verified from the raw body first, then parsed (sans-I/O)."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class BadRequest(Exception):
    """The delivery is malformed; `status` is the HTTP answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def verify_signature(body: bytes, header: str | None, secret: str) -> None:
    """Check X-Hub-Signature-256 against the raw body; sha256 only, constant time.

    https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
    """
    if not secret:
        raise BadRequest(401, "webhook secret is not configured")
    if not header or not header.startswith("sha256="):
        raise BadRequest(401, "missing or unsupported X-Hub-Signature-256")
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected.encode(), header.strip().encode()):
        raise BadRequest(401, "signature does not match")


def sign(body: bytes, secret: str) -> str:
    """The X-Hub-Signature-256 value GitHub would send for `body`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Event:
    """One verified delivery: event name, delivery GUID and the parsed payload."""

    name: str
    delivery_id: str
    data: Mapping[str, Any]

    @property
    def action(self) -> str | None:
        action = self.data.get("action")
        return action if isinstance(action, str) else None

    @property
    def installation_id(self) -> int | None:
        inst = self.data.get("installation")
        if isinstance(inst, Mapping) and isinstance(inst.get("id"), int):
            return int(inst["id"])
        return None

    @property
    def repo(self) -> str | None:
        repo = self.data.get("repository")
        if isinstance(repo, Mapping) and isinstance(repo.get("full_name"), str):
            return str(repo["full_name"])
        return None

    @property
    def sender(self) -> Mapping[str, Any]:
        sender = self.data.get("sender")
        return sender if isinstance(sender, Mapping) else {}

    @classmethod
    def from_http(cls, headers: Any, body: bytes, *, secret: str) -> Event:
        """Verify, then parse; raises BadRequest with the status to answer."""
        verify_signature(body, headers.get("X-Hub-Signature-256"), secret)
        name = headers.get("X-GitHub-Event")
        guid = headers.get("X-GitHub-Delivery")
        if not name or not guid:
            raise BadRequest(400, "missing X-GitHub-Event or X-GitHub-Delivery")
        if len(guid) > 64 or len(name) > 64:
            raise BadRequest(400, "X-GitHub-Event or X-GitHub-Delivery is too long")
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadRequest(400, f"body is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise BadRequest(400, "body is not a JSON object")
        return cls(name=name, delivery_id=guid, data=data)
