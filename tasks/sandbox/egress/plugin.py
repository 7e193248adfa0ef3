"""The proxy.py plugin of the setup proxy: host allowlist, refusals logged, credentials added."""

# This file runs inside the proxy container (mounted read-only as onloop_egress.py, started
# as `python -m onloop_egress <proxy.py flags> --plugins onloop_egress.EgressPolicyPlugin`),
# never in the worker: it imports nothing from onloop. Its policy is a JSON file written by
# tasks/sandbox/egress/gateway.py:
#   {"allow": [["pypi.org", 443], ...], "literal": ["10.0.0.5"], "auth": {"host:port": "Basic .."},
#    "intercept": ["pkgs.example.com:443"], "private": ["10.0.0.5"]}
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
                "private": set(data.get("private", [])),
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


# IPv6 forms that carry an IPv4 address (which is what the connection then reaches).
NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
CGNAT = ipaddress.ip_network("100.64.0.0/10")  # shared address space (RFC 6598)
NEVER = "resolves to a loopback, link-local or other local address"
PRIVATE = "resolves to a private address (an operator may allow a private index by name)"


def addresses(ip: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The address and every IPv4 address it carries: IPv4-mapped (::ffff:127.0.0.1),
    IPv4-compatible, 6to4, Teredo and NAT64 forms (RFC 4291, 3056, 4380, 6052)."""
    address = ipaddress.ip_address(ip.split("%", 1)[0])
    found: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        packed = int(address)
        if address.ipv4_mapped is not None:
            found.append(address.ipv4_mapped)
        if address.sixtofour is not None:
            found.append(address.sixtofour)
        if address.teredo is not None:
            found += list(address.teredo)
        if packed >> 32 == 0 and packed > 1:  # ::a.b.c.d, deprecated but still routed
            found.append(ipaddress.IPv4Address(packed))
        if any(address in net for net in NAT64):
            found.append(ipaddress.IPv4Address(packed & 0xFFFFFFFF))
    return found


def blocked_address(ip: str, private_ok: bool = False) -> str | None:
    """Why setup must not reach `ip`, or None: loopback, link-local (cloud metadata),
    unspecified and multicast never; private, shared (CGNAT) and reserved ranges only for a
    host the operator allowed as a private index."""
    try:
        found = addresses(ip)
    except ValueError:
        return NEVER
    for address in found:
        if address.is_loopback or address.is_link_local or address.is_unspecified:
            return NEVER
        if address.is_multicast:
            return NEVER
    for address in found:
        local = not address.is_global or address in CGNAT or address.is_reserved
        if local and not private_ok:
            return PRIVATE
    return None


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
        private_ok = name in policy()["private"]
        if name in policy()["literal"]:  # an address the policy names itself
            why = blocked_address(name, private_ok)
            if why:
                raise refuse(name, port, why)
            return None, None
        try:
            infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
        except OSError:
            # Refused, never (None, None): that would let proxy.py look the name up again
            # itself, unchecked, and a name that failed once may resolve somewhere else.
            raise refuse(name, port, "its name does not resolve") from None
        why = NEVER
        for info in infos:
            ip = str(info[4][0])
            why = blocked_address(ip, private_ok) or ""
            if not why:
                return ip, None  # connected to by address: a second lookup cannot rebind it
        raise refuse(name, port, why)

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
        # Only reads carry them: an upload (POST, PUT...) with the operator's credentials
        # could publish to the index in the operator's name.
        if (request.method or b"").upper() not in (b"GET", b"HEAD"):
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
