"""Sandbox output as HTML that is only text: every character escaped, ANSI colour codes
(SGR) turned into spans with classes, every other escape sequence dropped."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from markupsafe import Markup, escape

# CSI sequences (ESC [ params final) and OSC ones (ESC ] ... BEL or ESC \), per ECMA-48;
# SGR is the CSI ending in `m` (https://en.wikipedia.org/wiki/ANSI_escape_code#SGR).
_ESCAPE = re.compile(r"\x1b\[([0-?]*)[ -/]*([@-~])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.?")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_NAMES = ("black", "red", "green", "yellow", "blue", "magenta", "cyan", "white")


@dataclass(frozen=True)
class _Style:
    fg: str | None = None
    bg: str | None = None
    bold: bool = False
    dim: bool = False
    italic: bool = False
    underline: bool = False

    def classes(self) -> list[str]:
        names = [f"ansi-{self.fg}" if self.fg else "", f"ansi-bg-{self.bg}" if self.bg else ""]
        flags = {"bold": self.bold, "dim": self.dim, "italic": self.italic}
        names += [f"ansi-{name}" for name, on in flags.items() if on]
        names += ["ansi-underline"] if self.underline else []
        return [name for name in names if name]


def _colour(code: int, base: int) -> str:
    bright = code - base >= 60
    return ("bright-" if bright else "") + _NAMES[
        (code - base) % 10 if not bright else code - base - 60
    ]


def _apply(style: _Style, params: str) -> _Style:
    codes = [int(p) if p.isdigit() else 0 for p in params.split(";")] if params else [0]
    i = 0
    while i < len(codes):
        code = codes[i]
        if code == 0:
            style = _Style()
        elif code == 1:
            style = replace(style, bold=True)
        elif code == 2:
            style = replace(style, dim=True)
        elif code == 3:
            style = replace(style, italic=True)
        elif code == 4:
            style = replace(style, underline=True)
        elif code == 22:
            style = replace(style, bold=False, dim=False)
        elif code == 23:
            style = replace(style, italic=False)
        elif code == 24:
            style = replace(style, underline=False)
        elif 30 <= code <= 37 or 90 <= code <= 97:
            style = replace(style, fg=_colour(code, 30))
        elif 40 <= code <= 47 or 100 <= code <= 107:
            style = replace(style, bg=_colour(code, 40))
        elif code == 39:
            style = replace(style, fg=None)
        elif code == 49:
            style = replace(style, bg=None)
        elif code in (38, 48):  # 256-colour or RGB: not shown, their arguments skipped
            i += 2 if i + 1 < len(codes) and codes[i + 1] == 5 else 4
        i += 1
    return style


def _overwritten(text: str) -> str:
    """Each line as a terminal leaves it after carriage returns (progress bars): the last
    rewrite of it."""
    lines = text.split("\n")
    return "\n".join(line.rstrip("\r").rsplit("\r", 1)[-1] for line in lines)


def to_html(text: str) -> Markup:
    """`text` escaped, its SGR colours as `<span class="ansi-...">`; nothing of it is markup."""
    out: list[str] = []
    style = _Style()
    at = 0
    text = _overwritten(text)

    def emit(chunk: str) -> None:
        chunk = _CONTROL.sub("", chunk)
        if not chunk:
            return
        classes = style.classes()
        if classes:
            out.append(f'<span class="{" ".join(classes)}">{escape(chunk)}</span>')
        else:
            out.append(str(escape(chunk)))

    for match in _ESCAPE.finditer(text):
        emit(text[at : match.start()])
        at = match.end()
        if match.group(2) == "m":
            style = _apply(style, match.group(1) or "")
    emit(text[at:])
    return Markup("".join(out))  # noqa: S704 - built from escaped text and fixed class names
