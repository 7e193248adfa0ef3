"""Signed-in sessions for the pages: kept server-side in Redis, the browser holding only a
random id in an HttpOnly, SameSite=Lax cookie (Secure on https)."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

import redis
from werkzeug.wrappers import Response

COOKIE = "onloop_session"
KEY = "onloop:session:{}"


@dataclass(frozen=True)
class Session:
    """Who is signed in, and the token their forms must carry back (CSRF)."""

    id: str
    user_id: int
    login: str
    csrf: str


class Sessions:
    """Sessions in Redis, expiring after `hours`."""

    def __init__(self, client: redis.Redis, hours: int, public_url: str) -> None:
        self.client, self.seconds, self.public_url = client, hours * 3600, public_url

    def create(self, user_id: int, login: str) -> Session:
        session = Session(secrets.token_urlsafe(32), user_id, login, secrets.token_urlsafe(32))
        data = {"user_id": user_id, "login": login, "csrf": session.csrf}
        self.client.set(KEY.format(session.id), json.dumps(data), ex=self.seconds)
        return session

    def load(self, sid: str | None) -> Session | None:
        if not sid or len(sid) > 100:
            return None
        raw = self.client.get(KEY.format(sid))
        if raw is None:
            return None
        data = json.loads(raw)
        return Session(sid, int(data["user_id"]), str(data["login"]), str(data["csrf"]))

    def end(self, sid: str) -> None:
        self.client.delete(KEY.format(sid))

    def set_cookie(self, response: Response, session: Session) -> None:
        response.set_cookie(
            COOKIE,
            session.id,
            max_age=self.seconds,
            httponly=True,
            samesite="Lax",
            secure=self.public_url.startswith("https://"),
            path="/",
        )
