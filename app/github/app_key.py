"""The App's private key, parsed once per process and again only when its file changes."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.hazmat.primitives.serialization import load_pem_private_key

ALGORITHM = "RS256"  # what GitHub accepts for App JWTs


class AppKey:
    """Signs the App's JWTs. Parsing a PEM RSA key (with its consistency checks) costs about
    45 ms of CPU, and PyGithub parses the text it is given at every JWT, that is at every
    installation token minted; this parses the file once, and again after it is replaced
    (a rotated key takes effect without a restart)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._loaded: tuple[tuple[int, int, int], PrivateKeyTypes] | None = None

    def key(self) -> PrivateKeyTypes:
        """The key object, read afresh when the file's inode, size or mtime changed."""
        info = self.path.stat()
        stamp = (info.st_ino, info.st_size, info.st_mtime_ns)
        with self._lock:
            if self._loaded is None or self._loaded[0] != stamp:
                self._loaded = (stamp, load_pem_private_key(self.path.read_bytes(), None))
            return self._loaded[1]

    def sign(self, payload: dict[str, Any]) -> str:
        """`payload` as a JWT signed with the App's key (PyGithub's `sign_func`)."""
        return jwt.encode(payload, self.key(), algorithm=ALGORITHM)  # type: ignore[arg-type]
