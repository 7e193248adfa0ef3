"""The App's key: parsed once, its JWTs verify with its public key, and a replaced key file
takes effect without a restart."""

from __future__ import annotations

import os
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from app.github.app_key import AppKey


def write_key(path: Path) -> rsa.RSAPrivateKey:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    fresh = path.with_suffix(".new")
    fresh.write_bytes(pem)
    os.replace(fresh, path)  # as a rotation would: a new file under the old name
    return key


def test_jwts_verify_and_a_rotated_key_is_used_at_once(tmp_path: Path) -> None:
    path = tmp_path / "app.pem"
    first = write_key(path)
    signer = AppKey(path)
    claims = {"iss": "42", "iat": 1, "exp": 4_000_000_000}
    token = signer.sign(claims)
    assert jwt.decode(token, first.public_key(), algorithms=["RS256"]) == claims
    assert signer.key() is signer.key()  # parsed once while the file stays

    second = write_key(path)
    token = signer.sign(claims)
    assert jwt.decode(token, second.public_key(), algorithms=["RS256"]) == claims
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(token, first.public_key(), algorithms=["RS256"])
