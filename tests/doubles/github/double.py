"""GitHubDouble: the running server plus its state, keys and helpers for tests."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.doubles.github.api import API_PREFIX
from tests.doubles.github.model import App
from tests.doubles.github.server import DoubleServer
from tests.doubles.github.state import DEFAULT_EVENTS, DEFAULT_PERMISSIONS, State

WEBHOOK_SECRET = "test-webhook-secret-0123456789abcdef"
CREDENTIAL_HELPER = (
    '!f() { test "$1" = get || exit 0; echo username=x-access-token; '
    'echo "password=$GITHUB_DOUBLE_TOKEN"; }; f'
)


def _keypair(directory: Path, name: str) -> tuple[Path, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path = directory / name
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return path, public


class GitHubDouble(State):
    """A fake GitHub on 127.0.0.1: REST at `api_url`, git and web pages at `url`."""

    def __init__(
        self, root: Path | None = None, *, app_id: int = 4242, slug: str = "onloop"
    ) -> None:
        self._own_root = root is None
        self.base = Path(tempfile.mkdtemp(prefix="github-double-")) if root is None else root
        self.base.mkdir(parents=True, exist_ok=True)
        key_path, public = _keypair(self.base, "app.pem")
        app = App(
            app_id,
            slug,
            "onloop",
            "onloop-org",
            "Iv1.double0client",
            secrets.token_hex(20),
            WEBHOOK_SECRET,
            key_path,
            public,
            dict(DEFAULT_PERMISSIONS),
            list(DEFAULT_EVENTS),
        )
        self._generation = 0
        super().__init__(self._fresh_root(), app)
        self._server = DoubleServer(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True, name="github-double"
        )
        self._thread.start()

    def _fresh_root(self) -> Path:
        self._generation += 1
        root = self.base / f"world-{self._generation}"
        root.mkdir()
        return root

    # --- where it is -----------------------------------------------------------------------
    @property
    def url(self) -> str:
        """Web host (settings.github_url): git clone URLs and, later, OAuth pages."""
        return self._server.base_url

    @property
    def api_url(self) -> str:
        """REST base (settings.github_api_url), laid out like GitHub Enterprise: /api/v3."""
        return self._server.base_url + API_PREFIX

    @property
    def private_key_path(self) -> Path:
        return self.app.private_key_path

    def clone_url(self, repo: str) -> str:
        return f"{self.url}/{self.repo(repo).full_name}.git"

    def git_dir(self, repo: str) -> Path:
        return self.repo(repo).git_dir

    # --- helpers for tests -----------------------------------------------------------------
    def reset(self) -> None:
        """Forget everything but the app and its key: a clean world for the next test."""
        with self.lock:
            old, wake = self.root, self._wake
            State.__init__(self, self._fresh_root(), self.app)
        wake.set()
        shutil.rmtree(old, ignore_errors=True)

    def app_jwt(
        self,
        *,
        key_path: Path | None = None,
        iat: float | None = None,
        exp: float | None = None,
        iss: Any = None,
    ) -> str:
        """An app JWT signed like onloop should (or, with arguments, like it should not)."""
        now = time.time()
        claims = {
            "iat": int(now - 60 if iat is None else iat),
            "exp": int(now + 540 if exp is None else exp),
            "iss": str(self.app.id) if iss is None else iss,
        }
        return jwt.encode(claims, (key_path or self.private_key_path).read_bytes(), "RS256")

    def git_env(self, token: str | None = None) -> dict[str, str]:
        """Environment for a git subprocess: the token comes from a credential helper that reads
        $GITHUB_DOUBLE_TOKEN, so it is never in a URL, argv or a config file."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(
            {
                "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_CONFIG_GLOBAL": os.devnull,
                "GIT_TERMINAL_PROMPT": "0",
                "GIT_ASKPASS": "/bin/false",
                "GIT_AUTHOR_NAME": "Test",
                "GIT_AUTHOR_EMAIL": "test@example.invalid",
                "GIT_COMMITTER_NAME": "Test",
                "GIT_COMMITTER_EMAIL": "test@example.invalid",
                "GIT_CONFIG_COUNT": "1",
                "GIT_CONFIG_KEY_0": "credential.helper",
                "GIT_CONFIG_VALUE_0": CREDENTIAL_HELPER if token else "",
            }
        )
        if token:
            env["GITHUB_DOUBLE_TOKEN"] = token
        return env

    # --- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        self._wake.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        if self._own_root:
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> GitHubDouble:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
