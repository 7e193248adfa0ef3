"""The worker's sandbox backend and repository cache, made once per process from settings."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from app.settings import Settings
from tasks.repo_cache import RepoCache
from tasks.sandbox import Limits, SandboxBackend, get_backend


@dataclass
class Workplace:
    backend: SandboxBackend
    cache: RepoCache
    workspaces: Path

    def limits(self, timeout: float) -> Limits:
        return Limits(job_timeout=timeout, command_timeout=min(600.0, timeout))


_places: dict[tuple[str, str], Workplace] = {}
_lock = threading.Lock()


def workplace(settings: Settings) -> Workplace:
    key = (settings.sandbox_backend, str(settings.work_dir))
    with _lock:
        if key not in _places:
            root = Path(settings.work_dir).resolve()
            (root / "workspaces").mkdir(parents=True, exist_ok=True)
            _places[key] = Workplace(
                backend=get_backend(settings.sandbox_backend, runtime=settings.sandbox_runtime),
                cache=RepoCache(root / "mirrors"),
                workspaces=root / "workspaces",
            )
        return _places[key]
