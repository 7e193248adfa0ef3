"""Refused setup egress as a proposal: the `.github/onloop.yml` lines that would allow the hosts
the organisation permits, and the hosts only the operator can allow."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.markdown import fenced, inline_code
from app.policy.config_edit import Edit, EditError, add_egress
from app.policy.egress import EgressEntry, describe, destinations, narrow_egress

NOT_LISTED = "not on the allowlist"  # the proxy's reason when a list could allow the host
MAX_REFUSED = 50  # refusals kept per job; the rest are counted, not named
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_NAME = re.compile(rf"(?=.{{1,253}}\Z){_LABEL}(?:\.{_LABEL})+")
_WHY = re.compile(r"[a-z0-9 ,.()'-]{1,100}")
# Names that are a network's own, never a public registry's.
_LOCAL_SUFFIXES = (".local", ".localhost", ".internal", ".lan", ".home.arpa", ".localdomain")
CONFIG_PATH = ".github/onloop.yml"


def clean_host(value: object) -> str | None:
    """A host name (lower case, two labels at least, LDH) or an IP literal, else None. Host
    names come from the sandbox's setup: anything else is dropped, never shown."""
    if not isinstance(value, str) or len(value) > 253:
        return None
    text = value.strip().lower().removesuffix(".")
    try:
        return str(ipaddress.ip_address(text.strip("[]")))
    except ValueError:
        pass
    return text if _NAME.fullmatch(text) and not text.replace(".", "").isdigit() else None


def is_private(host: str) -> bool:
    """An address or name that is not on the public internet (never proposed)."""
    try:
        return not ipaddress.ip_address(host).is_global
    except ValueError:
        return host == "localhost" or host.endswith(_LOCAL_SUFFIXES)


@dataclass(frozen=True)
class Refused:
    """One refused connection, validated: a host, a port and the proxy's reason."""

    host: str
    port: int
    why: str = NOT_LISTED

    @property
    def target(self) -> str:
        """host, or host:port when the port is not 80 or 443."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port in (80, 443) else f"{host}:{self.port}"

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "port": self.port, "why": self.why}


def refused_from(items: object) -> tuple[list[Refused], int]:
    """The valid refusals among `items` (dicts of host, port, why), each once, and how many
    were dropped as not valid."""
    found: dict[tuple[str, int, str], Refused] = {}
    dropped = 0
    for item in items if isinstance(items, list) else []:
        host = clean_host(item.get("host")) if isinstance(item, dict) else None
        port = item.get("port") if isinstance(item, dict) else None
        why = item.get("why", NOT_LISTED) if isinstance(item, dict) else None
        valid_port = isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536
        if host is None or not valid_port or not isinstance(why, str) or not _WHY.fullmatch(why):
            dropped += 1
            continue
        assert isinstance(port, int)
        found.setdefault((host, port, why), Refused(host, port, why))
    kept = list(found.values())
    return kept[:MAX_REFUSED], dropped + max(0, len(kept) - MAX_REFUSED)


@dataclass(frozen=True)
class Proposal:
    """What to do about refused hosts: `entries` of the organisation's list the repository
    may add (allowing `allowed`), and `operator`, hosts only the organisation file can allow."""

    entries: tuple[EgressEntry, ...] = ()
    allowed: tuple[str, ...] = ()
    operator: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.entries or self.operator)


def propose(
    refused: Sequence[Refused],
    org: Sequence[EgressEntry] | None,
    repo: Sequence[EgressEntry] | None,
) -> Proposal:
    """For hosts refused as not listed: the organisation's entries (`org`, None for the
    built-in default) that allow them, when the repository's own list (`repo`, None when it
    sets none and so has the organisation's whole list) can add them; the others are the
    operator's. Never a private address or local name, never a wildcard entry."""
    org_entries = narrow_egress(org, None)[0]
    have: set[tuple[str, int]] = set()
    for entry in narrow_egress(org, repo)[0]:
        have |= destinations(entry)
    entries: dict[str, EgressEntry] = {}
    allowed: list[str] = []
    operator: list[str] = []
    for r in refused:
        if r.why != NOT_LISTED or (r.host, r.port) in have:
            continue
        match = [
            e for e in org_entries if (r.host, r.port) in destinations(e) and "*" not in describe(e)
        ]
        if match and repo is not None and not is_private(r.host):
            entries.setdefault(describe(match[0]), match[0])
            allowed.append(r.target)
        else:
            operator.append(r.target)
    return Proposal(
        tuple(entries.values()), tuple(dict.fromkeys(allowed)), tuple(dict.fromkeys(operator))
    )


def proposal_json(proposal: Proposal, text: str | None) -> dict[str, Any]:
    """The proposal as kept on the job's result (for its status comment), with the exact
    lines of `text` (the file on the default branch) that the edit adds or changes."""
    out: dict[str, Any] = {"allowed": list(proposal.allowed), "operator": list(proposal.operator)}
    if proposal.entries:
        out["entries"] = [describe(e) for e in proposal.entries]
        try:
            edit = add_egress(text or "", proposal.entries)
        except EditError as exc:
            out["error"] = str(exc)
        else:
            out["added"], out["removed"] = list(edit.added), list(edit.removed)
    return out


def edit_for(proposal: Proposal, text: str) -> Edit:
    """The file with the proposal's entries added (EditError when it cannot be done)."""
    return add_egress(text, proposal.entries)


def valid_target(text: str) -> bool:
    """Whether `text` reads as a `Refused.target`: a valid host, `[v6]`, with `:port` or not."""
    host, port = text, "443"
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":") if rest else port
    elif text.count(":") == 1:
        host, port = text.split(":")
    return clean_host(host) == host and port.isdigit() and 0 < int(port) < 65536


def _code_list(items: Sequence[str]) -> str:
    return ", ".join(inline_code(i) for i in items)


def _texts(value: object, limit: int = MAX_REFUSED) -> list[str]:
    return [str(v)[:300] for v in value[:limit]] if isinstance(value, list) else []


def render(data: Mapping[str, Any]) -> str:
    """The proposal (as `proposal_json` keeps it) in Markdown for the end of the status
    comment: names as code spans, lines fenced; '' when there is nothing to say. Targets are
    validated again here, as they came from the sandbox."""
    ok = [t for t in _texts(data.get("allowed")) if valid_target(t)]
    them = [t for t in _texts(data.get("operator")) if valid_target(t)]
    parts: list[str] = []
    added, removed = _texts(data.get("added"), 200), _texts(data.get("removed"), 10)
    if ok and added:
        lines = [*(f"-{r}" for r in removed), *(f"+{a}" for a in added)] if removed else added
        parts.append(
            f"**To allow {_code_list(ok)}** (the organisation permits it), "
            + ("change this line" if removed else "add these lines")
            + f" in `{CONFIG_PATH}` under `sandbox.egress`, or comment `/agent allow` and "
            "onloop opens a pull request in your name that does it:\n\n"
            + fenced("\n".join(lines), "diff" if removed else "yaml")
        )
    elif ok:
        why = str(data.get("error") or "the file could not be edited")[:300]
        parts.append(
            f"**To allow {_code_list(ok)}** (the organisation permits it), add "
            f"{_code_list(_texts(data.get('entries')))} to `sandbox.egress` in `{CONFIG_PATH}`"
            f" by hand: onloop cannot edit it ({inline_code(why)})."
        )
    if them:
        parts.append(
            f"**{_code_list(them)}:** the organisation file does not let a repository allow "
            f"{'it' if len(them) == 1 else 'them'}, so onloop's operator must allow "
            f"{'it' if len(them) == 1 else 'them'} in the organisation file "
            "(`sandbox.egress` in ONLOOP_CONFIG_FILE) first."
        )
    return "\n\n".join(parts)
