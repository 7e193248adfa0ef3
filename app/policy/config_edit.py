"""A minimal textual edit of `.github/onloop.yml`: entries added to `sandbox.egress`, the rest
of the file (comments, order, quoting) left exactly as it was."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import yaml

from app.policy.egress import EgressEntry, EgressIndex, check_entry, describe
from app.policy.repo_config import ConfigError, parse_repo_config

# A YAML plain scalar that means itself: no quoting needed (a registry name, most URLs).
_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9._~:/?#@!$&'()*+;=%-]*")


class EditError(ValueError):
    """onloop cannot add the entries to this file by a small edit; says why."""


@dataclass(frozen=True)
class Edit:
    """The file after the edit, and the lines it changed: `removed` (a flow list's line, as
    it was) and `added` (as they now read, with their indentation)."""

    text: str
    added: tuple[str, ...]
    removed: tuple[str, ...] = ()


def entry_yaml(entry: EgressEntry) -> str:
    """One entry as a YAML flow value: `pypi`, an URL, or `{url: ..., index: pip}`."""
    checked = check_entry(entry)
    if isinstance(checked, EgressIndex):
        index = f", index: {checked.index}" if checked.index else ""
        return f"{{url: {_scalar(checked.url)}{index}}}"
    return _scalar(describe(checked))


def _scalar(text: str) -> str:
    if _PLAIN.fullmatch(text) and ": " not in text and " #" not in text:
        if yaml.safe_load(text) == text:
            return text
    return json.dumps(text)  # a JSON string is a YAML double-quoted scalar


def _egress_node(text: str) -> yaml.SequenceNode:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        raise EditError("the file is not valid YAML") from None
    node: yaml.Node | None = root
    for key in ("sandbox", "egress"):
        if not isinstance(node, yaml.MappingNode):
            node = None
            break
        found = [v for k, v in node.value if str(k.value) == key]
        node = found[-1] if found else None
    if not isinstance(node, yaml.SequenceNode):
        raise EditError("the file has no `sandbox.egress` list to add to")
    return node


def add_egress(text: str, entries: Sequence[EgressEntry]) -> Edit:
    """`text` with `entries` appended to its `sandbox.egress` list (a block list gets new
    `- ` lines after its last item, a one-line flow list the items before its `]`); EditError
    when the file has no such list or the result would not read back as exactly that."""
    if not entries:
        raise EditError("nothing to add")
    node = _egress_node(text)
    values = [entry_yaml(e) for e in entries]
    lines = text.splitlines(keepends=True)
    if node.flow_style:
        start, end = node.start_mark, node.end_mark
        if start.line != end.line:
            raise EditError("its `sandbox.egress` list spans lines; add the entries by hand")
        row = lines[start.line]
        inside = row[start.column + 1 : end.column - 1]
        joined = ", ".join(values)
        new_inside = f"{inside.rstrip()}, {joined}" if inside.strip() else joined
        new_row = row[: start.column] + "[" + new_inside + "]" + row[end.column :]
        lines[start.line] = new_row
        edit = Edit("".join(lines), (new_row.rstrip("\r\n"),), (row.rstrip("\r\n"),))
    else:
        items = node.value
        if not items:
            raise EditError("its `sandbox.egress` list is empty")
        first, last = items[0], items[-1]
        dash = lines[first.start_mark.line][: first.start_mark.column]
        if dash.strip() != "-":
            raise EditError("its `sandbox.egress` list is not one item per line")
        prefix = dash[: len(dash) - len(dash.lstrip())] + "- "
        after = min(last.end_mark.line + (1 if last.end_mark.column > 0 else 0), len(lines))
        ending = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
        if after > 0 and not lines[after - 1].endswith(("\n", "\r")):
            lines[after - 1] += ending
        added = [f"{prefix}{v}" for v in values]
        lines[after:after] = [a + ending for a in added]
        edit = Edit("".join(lines), tuple(added))
    _check(text, edit.text, entries)
    return edit


def _check(before: str, after: str, entries: Sequence[EgressEntry]) -> None:
    """The edited file must parse to the old list plus `entries`, and nothing else changed."""
    try:
        old, _ = parse_repo_config(before)
        new, _ = parse_repo_config(after)
    except ConfigError as exc:
        raise EditError(f"the edited file would not be valid ({exc})") from None
    wanted = [*(old.sandbox.egress or []), *(check_entry(e) for e in entries)]
    same = new.model_dump(exclude={"sandbox"}) == old.model_dump(exclude={"sandbox"})
    sandbox_same = new.sandbox.model_dump(exclude={"egress"}) == old.sandbox.model_dump(
        exclude={"egress"}
    )
    if new.sandbox.egress != wanted or not same or not sandbox_same:
        raise EditError("a small edit would change more than `sandbox.egress`; edit it by hand")
