"""Sandbox output as page HTML: all of it escaped, SGR colours as classed spans, every other
escape sequence and control character dropped."""

from __future__ import annotations

from app.web.pages.ansi import to_html


def test_markup_in_output_is_text() -> None:
    html = to_html('<script>alert(1)</script> <!-- c --> ```x``` & "q"')
    assert html == (
        "&lt;script&gt;alert(1)&lt;/script&gt; &lt;!-- c --&gt; ```x``` &amp; &#34;q&#34;"
    )


def test_colours_become_spans_and_reset_ends_them() -> None:
    html = to_html("\x1b[1;31mbad\x1b[0m ok \x1b[92mgreen\x1b[39m \x1b[4;44mu\x1b[24mv")
    assert html == (
        '<span class="ansi-red ansi-bold">bad</span> ok '
        '<span class="ansi-bright-green">green</span> '
        '<span class="ansi-bg-blue ansi-underline">u</span><span class="ansi-bg-blue">v</span>'
    )


def test_other_sequences_and_controls_are_dropped() -> None:
    html = to_html("a\x1b]0;title\x07b\x1b[2Kc\x1b[38;5;196md\x1b[0m\x00e\x1b[38;2;1;2;3mf")
    assert html == "abcd" + "e" + "f"


def test_carriage_returns_keep_the_last_rewrite_of_a_line() -> None:
    assert to_html("10%\r50%\r100%\nnext\r\n") == "100%\nnext\n"


def test_a_colour_cannot_smuggle_markup_into_a_class() -> None:
    html = to_html('\x1b[31;"><b>m x')
    assert "<b>" not in html
