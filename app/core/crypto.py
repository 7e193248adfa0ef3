"""Secrets at rest and in flight: Fernet for stored tokens, signed expiring OAuth state."""

from __future__ import annotations

import base64
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer
from werkzeug.wrappers import Response


def _derive(secret_key: str, purpose: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(
        secret_key.encode()
    )


class TokenBox:
    """Encrypts tokens for the database with a key derived from ONLOOP_SECRET_KEY."""

    def __init__(self, secret_key: str) -> None:
        self._fernet = Fernet(base64.urlsafe_b64encode(_derive(secret_key, b"onloop-tokens")))

    def seal(self, value: str) -> str:
        return self._fernet.encrypt(value.encode()).decode()

    def open(self, sealed: str) -> str | None:
        """The plaintext, or None when the ciphertext is not ours (key changed, tampered)."""
        try:
            return self._fernet.decrypt(sealed.encode()).decode()
        except InvalidToken:
            return None


class StateSigner:
    """Signs the OAuth `state` parameter; it expires after `max_age` seconds."""

    def __init__(self, secret_key: str, max_age: int = 600) -> None:
        key = base64.urlsafe_b64encode(_derive(secret_key, b"onloop-oauth-state")).decode()
        self._serializer = URLSafeTimedSerializer(key, salt="oauth-state")
        self.max_age = max_age

    def sign(self, data: dict[str, Any]) -> str:
        return self._serializer.dumps(data)

    def verify(self, state: str) -> dict[str, Any] | None:
        try:
            data = self._serializer.loads(state, max_age=self.max_age)
        except (SignatureExpired, BadSignature):
            return None
        return data if isinstance(data, dict) else None


def set_nonce_cookie(
    response: Response, name: str, nonce: str, *, max_age: int, public_url: str, path: str
) -> None:
    """The cookie that ties a signed `state` to the browser that started the flow, so nobody
    can finish a flow they did not start in it (login CSRF)."""
    response.set_cookie(
        name,
        nonce,
        max_age=max_age,
        httponly=True,
        samesite="Lax",
        secure=public_url.startswith("https://"),
        path=path,
    )
