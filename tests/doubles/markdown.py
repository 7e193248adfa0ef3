"""What GitHub would render outside code: the text a CommonMark parser sees as prose or HTML."""

from __future__ import annotations

from markdown_it import MarkdownIt
from markdown_it.token import Token


def outside_code(markdown: str) -> str:
    """The prose and raw HTML of `markdown`, one piece a line: where GitHub links @mentions."""
    pieces: list[str] = []

    def walk(tokens: list[Token]) -> None:
        for token in tokens:
            if token.type in ("fence", "code_block", "code_inline"):
                continue
            if token.type in ("text", "html_inline", "html_block"):
                pieces.append(token.content)
            walk(token.children or [])

    walk(MarkdownIt("commonmark").parse(markdown))
    return "\n".join(pieces)


def code_blocks(markdown: str) -> list[str]:
    """The content of each fenced code block, as the parser finds them."""
    return [t.content for t in MarkdownIt("commonmark").parse(markdown) if t.type == "fence"]


def code_spans(markdown: str) -> list[str]:
    """The content of each inline code span."""
    return [
        child.content
        for token in MarkdownIt("commonmark").parse(markdown)
        for child in token.children or []
        if child.type == "code_inline"
    ]
