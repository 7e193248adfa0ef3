"""The request handler every double's HTTP server builds on: http.server's, with Nagle off."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler


class NoDelayHandler(BaseHTTPRequestHandler):
    """http.server writes a response's headers and its body in two sends. With Nagle's
    algorithm on, the body waits until the client acknowledges the headers, and a client
    delays that acknowledgement by up to 40 ms (Linux's delayed ACK): a stall on about half of
    the calls that GitHub's own servers do not have. TCP_NODELAY sends each write at once
    (https://docs.python.org/3/library/socketserver.html#socketserver.StreamRequestHandler)."""

    disable_nagle_algorithm = True
