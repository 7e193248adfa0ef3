"""A declarative router on (event, action), after gidgethub's `routing.Router`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from app.core.kinds import Kinds
from app.intake.events import Event
from app.policy.repo_config import RepoConfig

R = TypeVar("R")
Handler = Callable[[Event, RepoConfig, Kinds], R]


class Router(Generic[R]):
    """Maps (event name, action) to one handler; `action=None` matches any action."""

    def __init__(self) -> None:
        self._routes: dict[tuple[str, str | None], Handler[R]] = {}

    def register(self, event: str, action: str | None = None) -> Callable[[Handler[R]], Handler[R]]:
        def decorator(func: Handler[R]) -> Handler[R]:
            key = (event, action)
            if key in self._routes:
                raise ValueError(f"a handler for {event}.{action} is already registered")
            self._routes[key] = func
            return func

        return decorator

    def handler_for(self, event: Event) -> Handler[R] | None:
        return self._routes.get((event.name, event.action)) or self._routes.get((event.name, None))

    def routes(self) -> list[tuple[str, str | None]]:
        return sorted(self._routes, key=lambda k: (k[0], k[1] or ""))
