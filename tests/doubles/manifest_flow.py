"""A browser going through onloop's /setup page and the GitHub double's "new App" page."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import requests
from flask import Flask

from app.web.setup import setup_state
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.handlers.manifests import Created, book


def setup_path(app: Flask, query: str = "") -> str:
    """/setup with the setup code the operator read on the console, and `query` (`org=…`)."""
    return f"/setup?code={setup_state(app).code}" + (f"&{query}" if query else "")


def form(page: str) -> tuple[str, dict[str, Any]]:
    """The form's action URL and the manifest it posts, read from the page as a browser would."""
    action = re.search(r"<form id='manifest-form' action='([^']+)' method='post'>", page)
    value = re.search(r"<input type='hidden' name='manifest' value='([^']*)'>", page)
    assert action and value, page
    return html.unescape(action.group(1)), json.loads(html.unescape(value.group(1)))


def submit(action: str, body: dict[str, Any]) -> str:
    """The browser POSTs the form to GitHub; GitHub creates the App and redirects back."""
    answer = requests.post(
        action, data={"manifest": json.dumps(body)}, allow_redirects=False, timeout=10
    )
    assert answer.status_code == 302, answer.text
    return str(answer.headers["Location"])


def created(double: GitHubDouble) -> Created:
    (only,) = book(double).created.values()
    return only
