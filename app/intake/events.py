"""A webhook delivery as data: verified from the raw body first, then parsed (sans-I/O)."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

import msgspec

from app.intake.payloads import Payload, User, checked_payload, nullable

# The fields onloop reads (app.intake.payloads), each maybe null, the rest skipped unread.
_FIELDS = msgspec.json.Decoder(nullable(Payload))
_ANY = msgspec.json.Decoder()


def _parse(body: bytes) -> object:
    """The body as JSON: only the fields onloop reads when their types fit (4-6 times faster
    than `json` on a delivery); the whole body when one does not (its readers then leave
    that field out and name it); and by `json` what msgspec refuses and json takes (a lone
    surrogate escape, `NaN`, a byte order mark)."""
    try:
        return _FIELDS.decode(body)
    except msgspec.ValidationError:  # valid JSON, some field of another type
        return _ANY.decode(body)
    except msgspec.DecodeError:
        return json.loads(body)


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


# onloop's answer to an ignored delivery carries why in this header: a 204 has no body.
OUTCOME_HEADER = "X-Onloop-Outcome"


def sign(body: bytes, secret: str) -> str:
    """The X-Hub-Signature-256 value GitHub would send for `body`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class Headers(Protocol):
    """A request's headers, as Flask's (or a dict) gives them."""

    def get(self, key: str, /) -> str | None: ...


@dataclass(frozen=True)
class Event:
    """One verified delivery: event name, X-GitHub-Delivery GUID and the parsed body.

    `data` is the body as parsed (from HTTP: only the fields `Payload` names, unless one
    has another type); read it through `payload`, whose fields have the types
    `app.intake.payloads` gives them (a field of another type reads as absent, and is one
    of the `problems`)."""

    name: str
    delivery_guid: str
    data: Mapping[str, object]

    @cached_property
    def _checked(self) -> tuple[Payload, tuple[str, ...]]:
        return checked_payload(self.data)

    @property
    def payload(self) -> Payload:
        return self._checked[0]

    @property
    def problems(self) -> tuple[str, ...]:
        """The fields read as absent for their type or bounds, each with its path and why."""
        return self._checked[1]

    @property
    def action(self) -> str | None:
        return self.payload.get("action")

    @property
    def installation_id(self) -> int | None:
        return self.payload.get("installation", {}).get("id")

    @property
    def repo(self) -> str | None:
        return self.payload.get("repository", {}).get("full_name")

    @property
    def sender(self) -> User:
        return self.payload.get("sender", {})

    @classmethod
    def from_http(cls, headers: Headers, body: bytes, *, secret: str) -> Event:
        """Verify, then parse; raises BadRequest with the status to answer."""
        verify_signature(body, headers.get("X-Hub-Signature-256"), secret)
        name = headers.get("X-GitHub-Event")
        guid = headers.get("X-GitHub-Delivery")
        if not name or not guid:
            raise BadRequest(400, "missing X-GitHub-Event or X-GitHub-Delivery")
        if len(guid) > 64 or len(name) > 64:
            raise BadRequest(400, "X-GitHub-Event or X-GitHub-Delivery is too long")
        try:
            data = _parse(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadRequest(400, f"body is not JSON: {exc}") from None
        except RecursionError:  # nested deeper than Python's recursion limit
            raise BadRequest(400, "body is nested too deeply") from None
        if not isinstance(data, dict):
            raise BadRequest(400, "body is not a JSON object")
        return cls(name=name, delivery_guid=guid, data=data)
