"""What a job's setup may reach (from `sandbox.egress`), and what the proxy refused it."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import yaml

from app.policy.egress import (
    REGISTRIES,
    EgressEntry,
    EgressIndex,
    check_url,
    destinations,
    entry_url,
)

CACHE_MOUNT = "/opt/onloop-cache"  # pip/ and npm/ under it, mounted for setup only
TRUST_MOUNT = "/opt/onloop-trust"  # the job CA (ca.pem) and a bundle with it, for setup only
REFUSED_MARK = "onloop-egress-refused "  # as in plugin.py
UNTRUSTED = "its certificate is not trusted"  # an intercepted index's, as in plugin.py


@dataclass(frozen=True)
class Refusal:
    """A connection the proxy refused."""

    host: str
    port: int
    why: str = "not on the allowlist"

    @property
    def target(self) -> str:
        """host, or host:port when the port is not the usual one."""
        return self.host if self.port in (80, 443) else f"{self.host}:{self.port}"


def refusal_message(refused: Sequence[Refusal], advice: str = "") -> str:
    """What the status comment and check run say about refused connections ('' if none);
    `advice` replaces the default advice on hosts not allowed (where a proposal says more)."""
    said = []
    targets = list(dict.fromkeys(r.target for r in refused if r.why != UNTRUSTED))
    if targets:
        them = "it" if len(targets) == 1 else "them"
        advice = advice or f"allow {them} in .github/onloop.yml under sandbox.egress"
        said.append(f"setup tried to reach {', '.join(targets)}; {advice}")
    untrusted = list(dict.fromkeys(r.target for r in refused if r.why == UNTRUSTED))
    if untrusted:
        said.append(
            f"the setup proxy could not verify the certificate of {', '.join(untrusted)}, so "
            "it sent no credentials there; onloop's operator can add the CA that signed it "
            "to ONLOOP_EGRESS_CA_FILE"
        )
    return "; ".join(said)


def load_credentials(text: str) -> dict[str, str]:
    """Credentials for private indexes (operator config, YAML or JSON): `{URL: {username,
    password}}` or `{URL: {token}}`, as {"host:port": Authorization header value}."""
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:  # its message quotes the file: say where, not what
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ValueError(f"index credentials are not valid YAML{where}") from None
    if not isinstance(data, dict):
        raise ValueError("index credentials must map URLs to {username, password} or {token}")
    out: dict[str, str] = {}
    for url, cred in data.items():
        ((host, port),) = destinations(check_url(str(url)))
        if isinstance(cred, dict) and "token" in cred:
            out[f"{host}:{port}"] = f"Bearer {cred['token']}"
        elif isinstance(cred, dict) and "username" in cred:
            pair = f"{cred['username']}:{cred.get('password', '')}".encode()
            out[f"{host}:{port}"] = "Basic " + base64.b64encode(pair).decode()
        else:
            raise ValueError(f"credentials for {url}: need username/password or token")
    return out


@dataclass(frozen=True)
class EgressPolicy:
    """What one job's setup may reach, and the index settings its package managers get."""

    allow: frozenset[tuple[str, int]]
    pip_indexes: tuple[str, ...] = ()  # the first is PIP_INDEX_URL, the rest extra
    npm_registry: str | None = None
    trusted_hosts: tuple[str, ...] = ()  # plain-HTTP pip indexes
    auth: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    # HTTPS host:port pairs with credentials: the proxy intercepts their TLS to add them
    # (tasks/sandbox/egress/tls.py); every other HTTPS connection is an opaque tunnel.
    intercept: frozenset[str] = frozenset()
    # Whose download cache setup gets (e.g. `installation-42`): one installation's downloads,
    # some fetched with the operator's private-index credentials, never reach another's.
    cache_scope: str = ""
    # Whether setup gets that cache at all: not an untrusted head's, which could poison it
    # for the next job or read packages fetched with the operator's credentials.
    shared_cache: bool = True
    # Hosts (as listed) the operator allowed to be private indexes: only they may resolve to
    # a private address; loopback, link-local and the like are refused for every host.
    private: frozenset[str] = frozenset()

    @classmethod
    def from_entries(
        cls,
        entries: Sequence[EgressEntry],
        credentials: Mapping[str, str] | None = None,
        private: Sequence[str] = (),
    ) -> EgressPolicy:
        """The policy for a (narrowed) `sandbox.egress` list. Credentials apply to hosts on the
        list only; an HTTPS one among them is intercepted so the proxy can add them. Of the
        `private` hosts (the operator's private indexes), those on the list may be private."""
        allow: set[tuple[str, int]] = set()
        pip: list[str] = []
        npm: str | None = None
        trusted: list[str] = []
        tls: set[str] = set()  # host:port of entries that speak TLS (registries are HTTPS)
        for entry in entries:
            allow |= destinations(entry)
            url = entry_url(entry)
            if not (url or "https://").startswith("http://"):
                tls |= {f"{h}:{p}" for h, p in destinations(entry)}
            kind = entry.index if isinstance(entry, EgressIndex) else None
            if url is None:
                registry = REGISTRIES[str(entry)]
                pip += [registry.pip] if registry.pip else []
                npm = npm or registry.npm
                continue
            path = urlsplit(url).path.rstrip("/")
            if kind == "pip" or (kind is None and path.endswith("/simple")):
                pip.append(url)
                if url.startswith("http://"):
                    trusted.append(urlsplit(url).netloc)
            elif kind == "npm":
                npm = url
        listed = {f"{h}:{p}" for h, p in allow}
        auth = {k: v for k, v in (credentials or {}).items() if k in listed}
        hosts = {h for h, _ in allow}
        return cls(
            frozenset(allow),
            tuple(dict.fromkeys(pip)),
            npm,
            tuple(trusted),
            auth,
            frozenset(auth) & tls,
            private=frozenset(h for h in map(private_host, private) if h in hosts),
        )

    def __bool__(self) -> bool:
        return bool(self.allow)

    def fingerprint(self) -> str:
        """What of the policy decides what setup installs (part of the snapshot key)."""
        return json.dumps([self.pip_indexes, self.npm_registry], sort_keys=True)

    def document(self) -> dict[str, Any]:
        """The plugin's policy file."""
        literal = sorted(h for h, _ in self.allow if re.fullmatch(r"[\d.]+|[0-9a-f:]+", h))
        return {
            "allow": sorted(self.allow),
            "literal": literal,
            "auth": dict(self.auth),
            "intercept": sorted(self.intercept),
            "private": sorted(self.private),
        }

    def intercepted_hosts(self) -> list[str]:
        """The hosts whose TLS the proxy intercepts (the job CA's names)."""
        return sorted({key.rsplit(":", 1)[0] for key in self.intercept})

    def env(self, proxy_url: str, cache: bool) -> dict[str, str]:
        """The setup command's environment: proxy, indexes, caches, and trust in the job CA
        when the proxy intercepts (no credentials)."""
        env = {name: proxy_url for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy")}
        env |= {"https_proxy": proxy_url, "npm_config_proxy": proxy_url}
        env |= {"npm_config_https_proxy": proxy_url, "NO_PROXY": "", "no_proxy": ""}
        if self.pip_indexes:
            env["PIP_INDEX_URL"] = self.pip_indexes[0]
            if len(self.pip_indexes) > 1:
                env["PIP_EXTRA_INDEX_URL"] = " ".join(self.pip_indexes[1:])
        if self.trusted_hosts:
            env["PIP_TRUSTED_HOST"] = " ".join(self.trusted_hosts)
        if self.npm_registry:
            env["npm_config_registry"] = self.npm_registry
        if cache:
            env["PIP_CACHE_DIR"] = f"{CACHE_MOUNT}/pip"
            env["npm_config_cache"] = f"{CACHE_MOUNT}/npm"
        if self.intercept:
            # The public CAs plus the job's: for pip, requests, curl and Python's ssl module;
            # Node adds NODE_EXTRA_CA_CERTS to its own roots (npm and yarn).
            bundle = f"{TRUST_MOUNT}/bundle.pem"
            env |= {name: bundle for name in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")}
            env |= {"CURL_CA_BUNDLE": bundle, "NODE_EXTRA_CA_CERTS": f"{TRUST_MOUNT}/ca.pem"}
        return env


def private_host(name: str) -> str:
    """A private index's host as the allowlist spells it (an URL or a bare host name)."""
    text = name.strip()
    if "//" in text:
        return urlsplit(text).hostname or ""
    return text.strip("[]").rstrip(".").lower()


def parse_refusals(logs: str) -> list[Refusal]:
    """The refusals in a proxy log, each (host, port, why) once."""
    found: dict[tuple[str, int, str], Refusal] = {}
    for line in logs.splitlines():
        if not line.startswith(REFUSED_MARK):
            continue
        try:
            item = json.loads(line[len(REFUSED_MARK) :])
            refusal = Refusal(str(item["host"]), int(item["port"]), str(item.get("why", "")))
        except (ValueError, KeyError, TypeError):
            continue
        found.setdefault((refusal.host, refusal.port, refusal.why), refusal)
    return list(found.values())
