"""Sorting a review's threads into suggestions and remarks, and applying suggestions byte for
byte as GitHub's "Commit suggestion" does."""

from __future__ import annotations

import pytest

from app.github.threads import Thread, ThreadComment
from tasks.review.requests import Skip, apply_all, replace_lines, sort_out

BOT = "onloop[bot]"


def thread(
    tid: str,
    body: str,
    *,
    line: int | None = 2,
    start: int | None = None,
    path: str = "a.py",
    outdated: bool = False,
    resolved: bool = False,
    more: tuple[ThreadComment, ...] = (),
) -> Thread:
    first = ThreadComment(int(tid.strip("t") or 0) + 100, body, "rita")
    return Thread(tid, resolved, outdated, path, line, start, line or 2, "RIGHT", (first, *more))


def block(*lines: str) -> str:
    return "Try this:\r\n```suggestion\r\n" + "\r\n".join(lines) + "\r\n```\r\n"


def test_threads_sort_into_suggestions_remarks_and_skips() -> None:
    found = sort_out(
        [
            thread("t1", block("x = 1")),
            thread("t2", "Why not a constant?"),
            thread("t3", block("y = 2"), resolved=True),
            thread("t4", block("z = 3"), line=None, outdated=True),
            thread("t5", block("a") + block("b")),
            thread("t6", "Nit", more=(ThreadComment(9, "Done?", BOT),)),  # answered already
            thread("t7", "Nit", more=(ThreadComment(9, "x", BOT), ThreadComment(10, "no", "rita"))),
        ],
        BOT,
    )
    assert [(s.thread.id, s.start, s.end, s.lines) for s in found.suggestions] == [
        ("t1", 2, 2, ("x = 1",))
    ]
    assert [r.thread.id for r in found.remarks if r.thread] == ["t2", "t7"]
    assert [r.comments[-1].body for r in found.remarks] == ["Why not a constant?", "no"]
    assert [(i.thread.id, why) for i, why in found.skipped] == [
        ("t4", Skip.OUTDATED),
        ("t5", Skip.SEVERAL),
    ]
    assert not sort_out([thread("t2", "Why?")], BOT, remarks=False).remarks


def test_replacing_lines_keeps_every_other_byte() -> None:
    data = b"one\r\ntwo\r\nthree\x0cstill three\nfour"
    assert replace_lines(data, 2, 2, ["TWO"]) == b"one\r\nTWO\r\nthree\x0cstill three\nfour"
    assert replace_lines(data, 3, 4, ["3", "4"]) == b"one\r\ntwo\r\n3\n4"
    assert replace_lines(data, 1, 2, []) == b"three\x0cstill three\nfour"
    with pytest.raises(ValueError):
        replace_lines(data, 4, 5, ["x"])


def test_apply_all_applies_what_fits_and_lists_the_rest() -> None:
    files = {"a.py": b"1\n2\n3\n4\n5\n", "b.py": b"only\n", "c.bin": b"\xff\xfe\n"}
    found = sort_out(
        [
            thread("t1", block("TWO"), line=2),
            thread("t2", block("FOUR", "FOUR+"), start=4, line=5),
            thread("t3", block("x"), line=9, path="b.py"),
            thread("t4", block("x"), line=1, path="gone.py"),
            thread("t5", block("x"), line=1, path="c.bin"),
            thread("t6", block("p"), line=1, path="d.py"),
            thread("t7", block("q"), start=1, line=2, path="d.py"),
        ],
        BOT,
    )
    files["d.py"] = b"p\nq\n"
    changed, applied, skipped = apply_all(found.suggestions, files.get)
    assert changed == {"a.py": b"1\nTWO\n3\nFOUR\nFOUR+\n"}
    assert [s.thread.id for s in applied] == ["t1", "t2"]
    assert {s.thread.id: why for s, why in skipped} == {
        "t3": Skip.NOT_IN_FILE,
        "t4": Skip.NOT_A_FILE,
        "t5": Skip.NOT_TEXT,
        "t6": Skip.OVERLAPS,
        "t7": Skip.OVERLAPS,
    }
