"""The baseline for bench/intake.py: a Flask endpoint that only checks the HMAC and answers 202."""

from __future__ import annotations

import hashlib
import hmac
import os

from flask import Flask, Response, request

app = Flask(__name__)
SECRET = os.environ.get("ONLOOP_WEBHOOK_SECRET", "").encode()


@app.post("/webhooks/github")
def webhook() -> Response:
    body = request.get_data(cache=False)
    expected = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, request.headers.get("X-Hub-Signature-256", "")):
        return Response(status=401)
    return Response('{"jobs": []}', status=202, mimetype="application/json")
