"""Untrusted text in Markdown: fences it cannot close, code spans, defused mentions and refs."""

from __future__ import annotations

import html
import re

from markdown_it import MarkdownIt

_TICKS = re.compile(r"`+")
# GitHub links `@login`, `@org/team` and `#123` (also `owner/repo#123`) in rendered text and
# notifies or cross-references them; it does not inside code
# (https://docs.github.com/en/get-started/writing-on-github/getting-started-with-writing-and-formatting-on-github/basic-writing-and-formatting-syntax#mentioning-people-and-teams).
_MENTION = re.compile(r"@(?=[A-Za-z0-9])")
_REF = re.compile(r"#(?=\d)")
_LINE_END = re.compile(r"(\r\n|\r|\n)")
ZWSP = "\u200b"  # a zero-width space: `@​alice` still reads as @alice but links nobody


def fence_for(text: str, minimum: int = 3) -> str:
    """A backtick fence longer than any run of backticks in `text` (and at least `minimum`),
    so nothing in it closes the block; tildes cannot close a backtick fence at all
    (https://spec.commonmark.org/0.31.2/#fenced-code-blocks)."""
    longest = max((len(run) for run in _TICKS.findall(text)), default=0)
    return "`" * max(minimum, longest + 1)


def fenced(text: str, info: str = "") -> str:
    """`text` as a fenced code block that it cannot break out of; `info` (e.g. `diff`) may
    not hold backticks or line breaks, so they are dropped from it."""
    fence = fence_for(text)
    info = re.sub(r"[`\s]", "", info)
    return f"{fence}{info}\n{text}\n{fence}"


def inline_code(text: str) -> str:
    """`text` as one code span on one line, whatever backticks it holds
    (https://spec.commonmark.org/0.31.2/#code-spans)."""
    text = " ".join(text.splitlines()) or " "
    runs = {len(run) for run in _TICKS.findall(text)}
    ticks = next(n for n in range(1, len(runs) + 2) if n not in runs)
    pad = " " if text[0] in "` " or text[-1] in "` " else ""
    return f"{'`' * ticks}{pad}{text}{pad}{'`' * ticks}"


def defang(text: str) -> str:
    """`text` with every @mention and #ref outside code blocks broken by a zero-width space,
    so quoting it notifies and cross-references nobody; code blocks (a suggestion, say) are
    left as they were, as a CommonMark parser finds them."""
    parts = _LINE_END.split(text)  # lines as CommonMark counts them, then their ends
    lines = ["".join(parts[i : i + 2]) for i in range(0, len(parts), 2)]
    code: set[int] = set()
    for token in MarkdownIt("commonmark").parse(text):
        if token.type in ("fence", "code_block") and token.map:
            code.update(range(*token.map))
    return "".join(line if i in code else _defang_plain(line) for i, line in enumerate(lines))


def _defang_plain(text: str) -> str:
    return _REF.sub("#" + ZWSP, _MENTION.sub("@" + ZWSP, text))


def plain(text: str) -> str:
    """Untrusted text for an HTML context such as `<summary>`: escaped and defanged."""
    return _defang_plain(html.escape(" ".join(text.splitlines())))
