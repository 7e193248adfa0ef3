"""GET /setup and /setup/callback: register onloop's GitHub App from a manifest, write .env.

The page POSTs the manifest to GitHub; GitHub creates the App and sends the browser back with a
one-time code, which the callback converts into the App's id, key and secrets. It works only
while no App is configured (or `onloop setup --force`), since it rewrites the configuration,
and only for whoever has the setup code that onloop printed on its console when it started:
anyone else who reaches an unconfigured instance first could make it their App's.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from urllib.parse import urlencode

import structlog
from flask import Blueprint, Flask, Response, current_app, request

from app.core.crypto import StateSigner, set_nonce_cookie
from app.core.logs import get_logger
from app.core.settings import Settings
from app.github import manifest

bp = Blueprint("setup", __name__)
EXTENSION = "onloop.setup"
COOKIE = "onloop_setup"
PURPOSE = "app-manifest"
STATE_MAX_AGE = 3600  # GitHub's code lives an hour; so may the page that asked for it
CODE_PARAM = "code"  # /setup?code=…; on /setup/callback `code` is GitHub's, ours is in the state


def new_code() -> str:
    """A setup code: printed on the console, so only who runs onloop can open /setup."""
    return secrets.token_urlsafe(24)


@dataclass
class SetupOptions:
    """Where the callback writes, and whether it may replace values already there."""

    env_file: Path = Path(".env")
    key_file: Path | None = None  # default: next to env_file, named after the App
    overwrite: bool = False


@dataclass
class SetupState:
    settings: Settings
    options: SetupOptions
    log: structlog.stdlib.BoundLogger
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    written: list[str] = field(default_factory=list)
    written_key: str = ""
    code: str = field(default_factory=new_code)  # spent ("") once setup is done

    def holds(self, code: str) -> bool:
        """Whether `code` is this process's setup code, compared in constant time."""
        return bool(self.code) and hmac.compare_digest(code.encode(), self.code.encode())


def setup_url(settings: Settings, code: str, **query: str | None) -> str:
    """The /setup address to open, with the code (and e.g. `org=…`)."""
    params = {CODE_PARAM: code} | {k: v for k, v in query.items() if v}
    return f"{settings.public_url.rstrip('/')}/setup?{urlencode(params)}"


def init_app(
    app: Flask, settings: Settings, options: SetupOptions | None = None, code: str | None = None
) -> SetupState:
    """Register the blueprint on `app` (the full web app, or the bare one `onloop setup` runs);
    `code` is the setup code printed on the console (new_code() when None)."""
    state = SetupState(settings, options or SetupOptions(), get_logger("onloop.setup"))
    state.code = code or state.code
    app.extensions[EXTENSION] = state
    app.register_blueprint(bp)
    return state


def create_setup_app(settings: Settings, options: SetupOptions, code: str | None = None) -> Flask:
    """A Flask app with nothing but the setup pages, for `onloop setup`."""
    app = Flask(__name__)
    init_app(app, settings, options, code)
    return app


def _digest(code: str) -> str:
    """What the signed state carries of the code: it travels through GitHub, the code not."""
    return hashlib.sha256(code.encode()).hexdigest()


def setup_state(app: Flask) -> SetupState:
    state: SetupState = app.extensions[EXTENSION]
    return state


def _page(status: int, title: str, body: str) -> Response:
    html = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{escape(title)}</title></head><body><h1>{escape(title)}</h1>{body}</body></html>"
    )
    response = Response(html, status=status, mimetype="text/html")
    response.headers["Cache-Control"] = "no-store"
    response.headers["Referrer-Policy"] = "no-referrer"
    return response


def _blocked(state: SetupState) -> Response | None:
    """Why setup may not run now, as a page; None when it may."""
    if state.done.is_set():
        return _page(409, "Already done", "<p>The App is set up. Restart onloop to use it.</p>")
    if state.options.overwrite:
        return None
    if state.settings.app_id is not None:
        return _page(404, "Not available", "<p>onloop is already set up with a GitHub App.</p>")
    taken = manifest.existing(state.options.env_file)
    if taken:
        return _page(
            409,
            "Already configured",
            f"<p>{escape(str(state.options.env_file))} already sets {escape(', '.join(taken))}."
            " Nothing was changed. To replace them run <code>onloop setup --force</code>.</p>",
        )
    return None


def _signer(state: SetupState) -> StateSigner | None:
    key = state.settings.secret_key
    return StateSigner(key.get_secret_value(), max_age=STATE_MAX_AGE) if key else None


@bp.get("/setup")
def start() -> Response:
    state = setup_state(current_app)
    blocked = _blocked(state)
    if blocked is not None:
        return blocked
    if not state.holds(request.args.get(CODE_PARAM, "")):
        return _page(
            403,
            "Setup code needed",
            "<p>Open the address that onloop printed on its console when it started"
            " (<code>open …/setup?code=…</code>): only who runs onloop may register its"
            " GitHub App. Nothing was changed.</p>",
        )
    signer = _signer(state)
    if signer is None:
        return _page(503, "Not ready", "<p>Set ONLOOP_SECRET_KEY first (onloop setup does).</p>")
    org = request.args.get("org") or None
    if org is not None and not manifest.LOGIN.match(org):
        return _page(400, "Bad organisation name", "<p>That is not a GitHub login.</p>")
    name = (request.args.get("name") or manifest.default_name(state.settings, org)).strip()
    body = manifest.build_manifest(state.settings, name)
    nonce = secrets.token_urlsafe(16)
    signed = signer.sign({"p": PURPOSE, "n": nonce, "org": org, "c": _digest(state.code)})
    action = manifest.new_app_url(state.settings, org) + "?" + urlencode({"state": signed})
    where = f"the organisation <b>{escape(org)}</b>" if org else "your personal account"
    events = ", ".join(body["default_events"])
    permissions = ", ".join(f"{k}: {v}" for k, v in body["default_permissions"].items())
    response = _page(
        200,
        "Create onloop's GitHub App",
        f"<p>This registers a private GitHub App named <b>{escape(body['name'])}</b> on {where}"
        f" (GitHub lets you change the name). Permissions: {escape(permissions)}."
        f" Events: {escape(events)}. Webhooks go to"
        f" <code>{escape(body['hook_attributes']['url'])}</code>.</p>"
        f"<p>GitHub then sends you back here, and onloop writes the App's id, key and secrets"
        f" to <code>{escape(str(state.options.env_file))}</code>.</p>"
        f"<form id='manifest-form' action='{escape(action, quote=True)}' method='post'>"
        f"<input type='hidden' name='manifest' value='{escape(json.dumps(body), quote=True)}'>"
        "<button type='submit'>Create the GitHub App on GitHub</button></form>",
    )
    # The nonce ties the callback to this browser: nobody can make onloop write an App they
    # created into this configuration by sending someone a callback link.
    set_nonce_cookie(
        response,
        COOKIE,
        nonce,
        max_age=STATE_MAX_AGE,
        public_url=state.settings.public_url,
        path="/setup",
    )
    return response


@bp.get("/setup/callback")
def callback() -> Response:
    state = setup_state(current_app)
    again = "<p>Start again from the /setup address onloop printed on its console.</p>"
    signer = _signer(state)
    data = signer.verify(request.args.get("state", "")) if signer else None
    if data is None or data.get("p") != PURPOSE:
        return _page(400, "Setup link expired or invalid", "<p>Nothing was written.</p>" + again)
    # The cookie is per host: a setup started on 127.0.0.1 comes back to localhost without it.
    # The signed state still proves that who holds this console's setup code started it, so
    # setup finishes (GitHub has created the App by now) and the page says so.
    other_browser = not secrets.compare_digest(
        str(data.get("n", "")), request.cookies.get(COOKIE, "")
    )
    code = request.args.get("code", "")
    if not code:
        return _page(400, "GitHub sent no code", "<p>Nothing was written.</p>" + again)
    with state.lock:  # one callback at a time: a second one finds the first one's values
        blocked = _blocked(state)  # checked again, before the one-time code is spent
        if blocked is not None:
            return blocked
        if not state.code or not hmac.compare_digest(str(data.get("c", "")), _digest(state.code)):
            return _page(403, "Setup code spent or replaced", "<p>Nothing was written.</p>")
        try:
            app = manifest.convert(state.settings, code)
        except manifest.ConversionError as exc:
            state.log.warning("app manifest conversion failed", reason=str(exc))
            text = f"<p>{escape(str(exc))}.</p>" + again
            return _page(502, "GitHub did not create the App", text)
        written = _write(state, app)
        state.code = ""  # spent: the setup code completes one setup
        state.done.set()
    state.log.info("github app registered", app_id=app.id, slug=app.slug, written=written)
    warning = ""
    if other_browser:
        state.log.warning("setup finished without its browser cookie", host=request.host)
        warning = (
            "<p><b>Note:</b> this browser (or this host name) is not the one that opened"
            f" /setup; the signed setup link was valid, so setup finished. Open onloop at"
            f" <code>{escape(state.settings.public_url)}</code> (ONLOOP_PUBLIC_URL) next time.</p>"
        )
    install = f"{app.html_url.rstrip('/')}/installations/new" if app.html_url else ""
    missing = ""
    if not app.webhook_secret:
        missing = (
            "<p><b>GitHub made no webhook secret:</b> set one in the App's settings and put it"
            " in ONLOOP_WEBHOOK_SECRET.</p>"
        )
    response = _page(
        200,
        "onloop's GitHub App is ready",
        f"<p>Created <b>{escape(app.slug)}</b> (App id {app.id}). Written to"
        f" <code>{escape(str(state.options.env_file))}</code>: {escape(', '.join(written))}."
        f" The private key is in <code>{escape(state.written_key)}</code>.</p>{missing}{warning}"
        "<p>Next: restart onloop, then "
        + (f"<a href='{escape(install, quote=True)}'>install the App</a>" if install else "install")
        + " on your repositories.</p>",
    )
    response.delete_cookie(COOKIE, path="/setup")
    return response


def _write(state: SetupState, app: manifest.AppCredentials) -> list[str]:
    options = state.options
    env_file = options.env_file.resolve()
    wanted = options.key_file or env_file.parent / f"{app.slug}.private-key.pem"
    key_path = manifest.write_private_key(wanted, app.pem, overwrite=options.overwrite)
    values = manifest.credentials_env(app, key_path)
    manifest.update_env(env_file, values)
    state.written = sorted(values)
    state.written_key = str(key_path)
    return state.written
