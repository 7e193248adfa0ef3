"""README's first set-up command, verbatim, in a fresh virtual environment in a clean copy of
the repository: it serves /healthz, and `onloop replay` with no other set-up gets a 2xx."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.doubles.webhooks import FIXTURES

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def readme_first_command() -> str:
    """The line of README's set-up block that runs onloop, without its comment."""
    block = re.search(
        r"## Set-up on a fresh machine.*?```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S
    )
    assert block, "README has no set-up block"
    (line,) = [x for x in block.group(1).splitlines() if "onloop dev" in x]
    return line.split("#", 1)[0].strip()


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def clean_copy(to: Path) -> Path:
    """The repository's tracked files (as a fresh clone has them), nothing generated."""
    files = (
        subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, to / name)
    return to


@pytest.mark.skipif(
    not os.environ.get("ONLOOP_TEST_DATABASE_URL", "").startswith("postgresql"),
    reason="once per CI run (port 8000 is the command's own): in the PostgreSQL run",
)
def test_readme_set_up_runs_onloop_and_replay_reaches_it(tmp_path: Path) -> None:
    command = readme_first_command()
    assert command == "python3 -m pip install -e '.[test]' && onloop dev"
    if not port_free(8000):
        pytest.skip("port 8000, the command's default, is taken on this machine")
    repo = clean_copy(tmp_path / "onloop")
    venv = tmp_path / "venv"
    # The machine's packages are visible (no downloads here), onloop itself is not: the
    # command must install it from the copy.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ONLOOP_", "PYTHON"))}
    env |= {"PATH": f"{venv / 'bin'}:{env['PATH']}", "VIRTUAL_ENV": str(venv)}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    proc = subprocess.Popen(
        ["bash", "-c", command],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if requests.get("http://127.0.0.1:8000/healthz", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "onloop dev did not serve /healthz"
            time.sleep(0.5)
        onloop = str(venv / "bin" / "onloop")
        ping = str(FIXTURES / "ping.with-app_id.json")
        sent = subprocess.run(
            [onloop, "replay", ping, "--event", "ping"],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert sent.returncode == 0 and sent.stdout[:1] == "2", sent.stdout + sent.stderr
        installed = subprocess.run(
            [onloop, "--version"], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert installed.returncode == 0
        where = subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import app; print(app.__file__)"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
        )
        assert where.stdout.startswith(str(repo)), where.stdout  # the copy's code ran
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
