"""CI log excerpts on real-format output: ruff, mypy and pytest run here for real on a small
broken project; eslint, tsc, go test and cargo output is real output saved under
tests/fixtures/ci_logs/. Each is wrapped in the GitHub Actions job log format."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tasks.ci.logs import LogExcerpt, clean, excerpt
from tests.doubles.actions_log import actions_log

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ci_logs"
NOISE = ("Syncing repository", "pythonLocation", "Post job cleanup", "shell: /usr/bin/bash")

BAD = (
    "import os\n\n\ndef add(a: int, b: int) -> int:\n    return a - b\n\n\n"
    'x: int = "s"\ny = undefined_name\n'
)
TESTS = (
    "from bad import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n\n\n"
    "def test_passes():\n    assert add(2, 0) == 2\n"
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "test_bad.py").write_text(TESTS)
    return tmp_path


def run(project: Path, *args: str) -> tuple[str, int]:
    """A tool's real combined output and exit code, as a CI step would print it."""
    done = subprocess.run(
        [sys.executable, "-m", *args],
        cwd=project,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "PYTHONDONTWRITEBYTECODE": "1"},
    )
    return done.stdout + done.stderr, done.returncode


def no_noise(result: LogExcerpt) -> None:
    assert not [line for line in result.lines if any(n in line for n in NOISE)], result.lines


def test_ruff_full_format(project: Path) -> None:
    output, code = run(project, "ruff", "check", "--no-cache", ".")
    assert code == 1 and " --> bad.py:1:8" in output  # the tool's real (full) format
    result = excerpt(actions_log("ruff check .", output, code, before=[("pip install ruff", "")]))
    assert result.tool == "ruff" and result.failing_step == "ruff check ."
    assert result.lines[:3] == [
        "F401 [*] `os` imported but unused",
        " --> bad.py:1:8",
        "help: Remove unused import: `os`",
    ]
    assert "F821 Undefined name `undefined_name`" in result.lines
    assert result.lines[-2:] == ["Found 2 errors.", "[*] 1 fixable with `--fix`."]
    no_noise(result)


def test_ruff_concise_and_format_check(project: Path) -> None:
    output, code = run(project, "ruff", "check", "--no-cache", "--output-format=concise", ".")
    result = excerpt(actions_log("ruff check --output-format=concise .", output, code))
    assert result.tool == "ruff"
    assert result.lines[:2] == [
        "bad.py:1:8: F401 [*] `os` imported but unused",
        "bad.py:9:5: F821 Undefined name `undefined_name`",
    ]
    (project / "ugly.py").write_text("x = {  'a':1 }\n")
    output, code = run(project, "ruff", "format", "--no-cache", "--check", ".")
    result = excerpt(actions_log("ruff format --check .", output, code))
    assert result.tool == "ruff"
    assert result.lines == [
        "unformatted: File would be reformatted",
        " --> ugly.py:1:6",
        "1 file would be reformatted, 2 files already formatted",
    ]


def test_mypy(project: Path) -> None:
    output, code = run(project, "mypy", "--no-incremental", "--strict", "bad.py")
    assert code == 1
    passing = ("ruff check .", "All checks passed!\n")
    result = excerpt(actions_log("mypy --strict bad.py", output, code, before=[passing]))
    assert result.tool == "mypy" and result.failing_step == "mypy --strict bad.py"
    errors = [line for line in output.splitlines() if ": error: " in line]
    assert len(errors) == 2
    assert result.lines == [*errors, "Found 2 errors in 1 file (checked 1 source file)"]


def test_pytest(project: Path) -> None:
    (project / "bad.py").write_text("def add(a, b):\n    return a - b\n")
    output, code = run(project, "pytest", "-p", "no:cacheprovider", "test_bad.py")
    assert code == 1
    result = excerpt(actions_log("python -m pytest", output, code))
    assert result.tool == "pytest" and result.failing_step == "python -m pytest"
    text = result.text
    assert "_________________________________ test_add _________________________________" in text
    assert ">       assert add(1, 2) == 3" in result.lines
    assert "E       assert -1 == 3" in result.lines
    assert "test_bad.py:5: AssertionError" in result.lines
    assert "FAILED test_bad.py::test_add - assert -1 == 3" in result.lines
    assert result.lines[-1].startswith("========================= 1 failed, 1 passed in ")
    assert "test_passes" not in text and "platform linux" not in text
    no_noise(result)


def test_pytest_collection_error(project: Path) -> None:
    output, code = run(project, "pytest", "-q", "-p", "no:cacheprovider", "test_bad.py")
    result = excerpt(actions_log("pytest -q", output, code))
    assert result.tool == "pytest"
    assert result.lines == [
        "_________________________ ERROR collecting test_bad.py _________________________",
        "test_bad.py:1: in <module>",
        "    from bad import add",
        "bad.py:9: in <module>",
        "    y = undefined_name",
        "E   NameError: name 'undefined_name' is not defined",
        "ERROR test_bad.py - NameError: name 'undefined_name' is not defined",
        "!!!!!!!!!!!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!!!!!!!!!!!",
        result.lines[-1],
    ]
    assert result.lines[-1].startswith("1 error in ")


def test_two_tools_in_one_step(project: Path) -> None:
    ruff_out, _ = run(project, "ruff", "check", "--no-cache", "--output-format=concise", ".")
    mypy_out, _ = run(project, "mypy", "--no-incremental", "bad.py")
    result = excerpt(actions_log("make -k lint", ruff_out + mypy_out, 2))
    assert result.tool == "ruff+mypy"
    assert "bad.py:1:8: F401 [*] `os` imported but unused" in result.lines
    assert any(": error: Incompatible types in assignment" in line for line in result.lines)


FIXTURE_CASES = {
    "eslint.log": (
        "eslint",
        "npx eslint src",
        [
            "/home/runner/work/web/web/src/app.js",
            "  3:18  error  'nam' is not defined                         no-undef",
            "/home/runner/work/web/web/src/util.js",
            "  2:20  error    Unexpected 'debugger' statement      no-debugger",
            "✖ 5 problems (4 errors, 1 warning)",
        ],
    ),
    "tsc.log": (
        "tsc",
        "npx tsc -p .",
        [
            "src/a.ts(4,7): error TS2322: Type 'string' is not assignable to type 'number'.",
            "  Types of parameters 'v' and 'v' are incompatible.",
            "    Type 'number' is not assignable to type 'string'.",
        ],
    ),
    "go_test.log": (
        "go test",
        "go test ./...",
        [
            "--- FAIL: TestAdd (0.00s)",
            "    calc_test.go:7: Add(1, 2) = -1; want 3",
            "        calc_test.go:14: Div(1, 0) = -1; want 0",
            "FAIL\texample.com/calc\t0.003s",
            "strutil/s_test.go:8:11: undefined: missing",
            "FAIL\texample.com/calc/strutil [build failed]",
        ],
    ),
    "cargo_test.log": (
        "cargo",
        "cargo test",
        [
            "---- tests::adds stdout ----",
            "thread 'tests::adds' (13519) panicked at src/lib.rs:11:9:",
            "  left: -1",
            "called `Result::unwrap()` on an `Err` value: ParseIntError { kind: InvalidDigit }",
            "test result: FAILED. 1 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; "
            "finished in 0.00s",
        ],
    ),
    "cargo_build.log": (
        "cargo",
        "cargo build --color always",
        [
            "error[E0425]: cannot find value `y` in this scope",
            " --> src/main.rs:4:30",
            "error[E0308]: mismatched types",
            '2 |     let x: i32 = "a";',
            'error: could not compile `tool` (bin "tool") due to 2 previous errors',
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(FIXTURE_CASES))
def test_saved_tool_output(name: str) -> None:
    tool, step, expected = FIXTURE_CASES[name]
    result = excerpt((FIXTURES / name).read_text())
    assert (result.tool, result.failing_step) == (tool, step)
    missing = [line for line in expected if line not in result.lines]
    assert not missing, result.lines
    assert not any("\x1b" in line for line in result.lines)  # cargo's colours are gone
    assert "ok  \texample.com/calc/okpkg\t0.002s" not in result.lines
    assert not any(x in result.text for x in ("RUST_BACKTRACE", "running 3 tests", "audited"))
    no_noise(result)


def test_unknown_tool_gives_the_last_lines() -> None:
    output = (
        "".join(f"cc -c part{i}.c\n" for i in range(200))
        + "make: *** [Makefile:3: all] Error 2\n\n"
    )
    result = excerpt(actions_log("make", output, 2, toolchain="go"), max_lines=30)
    assert result.tool is None and result.failing_step == "make"
    assert len(result.lines) == 30
    assert result.lines[-1] == "make: *** [Makefile:3: all] Error 2"
    assert result.lines[0] == "cc -c part171.c"


def test_long_excerpts_keep_the_start_and_the_end(project: Path) -> None:
    (project / "many.py").write_text("".join(f"import mod{i}\n" for i in range(150)))
    output, code = run(project, "ruff", "check", "--no-cache", "--output-format=concise", ".")
    result = excerpt(actions_log("ruff check .", output, code), max_lines=40)
    assert len(result.lines) == 40
    assert any(line.startswith("[… ") and "left out" in line for line in result.lines)
    assert result.lines[0].startswith("bad.py:1:8: F401")
    assert result.lines[-2].startswith("Found 152 errors.")


def test_an_action_failing_without_an_exit_code_line() -> None:
    log = actions_log(
        "actions/upload-artifact@v4", "With the provided path, there will be 0 files", 0
    )
    log = log.replace(
        "Post job cleanup.",
        "##[error]No files were found with the provided path: dist/. "
        "No artifacts will be uploaded.\n"
        "2024-05-14T09:12:02.0000000Z Post job cleanup.",
    )
    result = excerpt(log)
    assert result.failing_step == "actions/upload-artifact@v4" and result.tool is None
    assert result.lines[-1].startswith("[error] No files were found with the provided path")


def test_plain_output_without_actions_markers(project: Path) -> None:
    output, _ = run(project, "mypy", "--no-incremental", "bad.py")
    result = excerpt(output)
    assert result.tool == "mypy" and result.failing_step is None
    assert result.lines[-1].startswith("Found 2 errors in 1 file")


def test_clean_and_markdown() -> None:
    assert clean("\ufeff2024-01-01T00:00:00.0000000Z \x1b[31mred\x1b[0m\r\n") == ["red"]
    assert clean("2024-01-01T00:00:00.0000000Z 10%\r50%\r100%") == ["100%"]
    result = LogExcerpt("pytest", "pytest -q", ["E   assert '```' == ''"])
    text = result.markdown(job="test (3.12)")
    assert text.startswith("Failing in job `test (3.12)`, step `pytest -q` (pytest output):")
    assert "\n````text\nE   assert '```' == ''\n````\n" in text
