"""The proxy.py plugin of the setup proxy: host allowlist, refusals logged, credentials added."""

# This file runs inside the proxy container (mounted read-only as onloop_egress.py, started
# as `python -m onloop_egress <proxy.py flags> --plugins onloop_egress.EgressPolicyPlugin`),
# never in the worker: it imports nothing from onloop. Its policy is a JSON file written by
# tasks/sandbox/egress/gateway.py:
#   {"allow": [["pypi.org", 443], ...], "literal": ["10.0.0.5"], "auth": {"host:port": "Basic .."},
#    "intercept": ["pkgs.example.com:443"]}
# TLS to an "intercept" host is opened by the proxy (with the host certificate the worker made
# for the job, see tasks/sandbox/egress/tls.py) so that its credentials can be added; every
# other CONNECT stays an opaque tunnel.
# Refusals are written to stderr as one JSON object a line after REFUSED_MARK; the worker reads
# them back from the container's log.

from __future__ import annotations

import ipaddress
import json
import logging
import os
import socket
import sys
import threading
from typing import Any

import proxy
from proxy.http.exception import HttpRequestRejected
from proxy.http.parser import HttpParser
from proxy.http.proxy import HttpProxyBasePlugin

POLICY_FILE = os.environ.get("ONLOOP_EGRESS_POLICY_FILE", "/opt/onloop-egress/policy.json")
REFUSED_MARK = "onloop-egress-refused "
UNTRUSTED = "its certificate is not trusted"  # as in egress_policy.py
# What proxy.py 2.4 (pinned in config/sandbox/tools.txt) logs when an intercepted host's
# certificate does not verify; it has no plugin hook for it.
UNVERIFIED = "Server raised cert verification error for upstream: "
READY_MARK = "onloop-egress-ready"
_lock = threading.Lock()
_policy: dict[str, Any] | None = None


def policy() -> dict[str, Any]:
    """The allowlist, read once per process."""
    global _policy
    with _lock:
        if _policy is None:
            with open(POLICY_FILE, encoding="utf-8") as f:
                data = json.load(f)
            _policy = {
                "allow": {(str(h).lower(), int(p)) for h, p in data.get("allow", [])},
                "literal": set(data.get("literal", [])),
                "auth": dict(data.get("auth", {})),
                "intercept": set(data.get("intercept", [])),
            }
        return _policy


def normal_host(raw: bytes | str | None) -> str:
    """The request's host as the allowlist spells it: lower case, no brackets or final dot."""
    if raw is None:
        return ""
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw
    return text.strip().strip("[]").rstrip(".").lower()


def record(host: str, port: int, why: str) -> None:
    """Log a refusal for the worker."""
    line = json.dumps({"host": host, "port": port, "why": why}, sort_keys=True)
    sys.stderr.write(REFUSED_MARK + line + "\n")
    sys.stderr.flush()


def refuse(host: str, port: int, why: str) -> HttpRequestRejected:
    """Log the refusal for the worker and make the answer the client gets."""
    record(host, port, why)
    body = (
        f"onloop: {host}:{port} is not allowed ({why}); "
        "allow it in .github/onloop.yml under sandbox.egress\n"
    ).encode()
    return HttpRequestRejected(status_code=403, reason=b"Forbidden", body=body)


def blocked_address(ip: str) -> bool:
    """Addresses never reached by name: loopback, link-local (cloud metadata), unspecified."""
    address = ipaddress.ip_address(ip)
    return address.is_loopback or address.is_link_local or address.is_unspecified


class EgressPolicyPlugin(HttpProxyBasePlugin):
    """Allows only (host, port) pairs on the list; adds an index's credentials to the requests
    sent to it: plain HTTP, or HTTPS the proxy intercepts (other tunnels pass untouched).

    proxy.py makes one instance per client connection, and a connection has one upstream."""

    upstream: tuple[str, int] | None = None  # where this connection's requests really go
    tunnel = False  # the connection is a CONNECT tunnel...
    intercepted = False  # ...whose TLS the proxy opened, having verified the upstream

    def _target(self, request: HttpParser) -> tuple[str, int]:
        return normal_host(request.host), int(request.port or 0)

    def before_upstream_connection(self, request: HttpParser) -> HttpParser | None:
        host, port = self._target(request)
        if (host, port) not in policy()["allow"]:
            raise refuse(host, port, "not on the allowlist")
        self.upstream, self.tunnel = (host, port), request.is_https_tunnel
        return request

    def do_intercept(self, request: HttpParser) -> bool:
        host, port = self._target(request)
        # proxy.py looks the host certificate up under the host as the client spelt it
        exact = (request.host or b"").decode("ascii", "replace") == host
        self.intercepted = exact and f"{host}:{port}" in policy()["intercept"]
        return self.intercepted

    def resolve_dns(self, host: str, port: int) -> tuple[str | None, None]:
        name = normal_host(host)
        if name in policy()["literal"]:
            return None, None  # an address the policy names itself
        try:
            infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
        except OSError:
            return None, None  # proxy.py reports the failure to the client
        for info in infos:
            ip = str(info[4][0])
            if not blocked_address(ip):
                return ip, None
        raise refuse(name, port, "resolves to a loopback or link-local address")

    def handle_client_request(self, request: HttpParser) -> HttpParser | None:
        if request.is_https_tunnel or self.upstream is None:
            return request  # the CONNECT itself; requests inside come here only if intercepted
        # Keyed on the upstream, never on the request's own host: a later request on the same
        # connection may name another host, but it still goes where the first one went.
        host, port = self.upstream
        key = f"{host}:{port}"
        # An HTTPS index's credentials go only inside TLS the proxy opened after verifying
        # the index, never in a plain request that names its host and port (in clear, to
        # whatever answers there); a plain-HTTP index's go only in plain requests.
        secure = self.tunnel and self.intercepted
        if secure != (key in policy()["intercept"]):
            return request
        value = policy()["auth"].get(key)
        if value:
            request.del_header(b"authorization")
            request.add_header(b"Authorization", value.encode())
        return request


class UnverifiedUpstream(logging.Filter):
    """Records an intercepted index whose certificate did not verify (so no credentials
    went to it) as a refusal the worker can explain."""

    def filter(self, record_: logging.LogRecord) -> bool:
        text = record_.getMessage()
        if UNVERIFIED in text:
            host = normal_host(text.split(UNVERIFIED, 1)[1])
            keys = [k.rsplit(":", 1) for k in policy()["intercept"]]
            for port in [int(p) for h, p in keys if h == host] or [443]:
                record(host, port, UNTRUSTED)
        return True


def main() -> None:
    """Run proxy.py (embedded, as its README shows) and say on stderr once it listens."""
    logging.getLogger("proxy.http.proxy.server").addFilter(UnverifiedUpstream())

    with proxy.Proxy(sys.argv[1:]) as running:
        sys.stderr.write(READY_MARK + "\n")
        sys.stderr.flush()
        proxy.sleep_loop(running)


if __name__ == "__main__":
    main()
