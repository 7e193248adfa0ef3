"""Finding helm for the chart tests: `.ci/helm.sh` installs it; CI fails without it, else skip."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "onloop"


def helm_binary() -> str | None:
    tools = Path(os.environ.get("ONLOOP_TOOLS_DIR") or Path.home() / ".cache/onloop/tools")
    for candidate in (os.environ.get("ONLOOP_HELM"), str(tools / "helm"), shutil.which("helm")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def require_helm() -> str:
    """helm's path; in CI (CI=true) a missing helm fails the test, elsewhere it skips."""
    found = helm_binary()
    if found is None:
        message = "helm is not installed: run `bash .ci/helm.sh`"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    """Run helm offline, in a private home, so no repository config or cache is used."""
    home = Path(os.environ.get("TMPDIR", "/tmp")) / "onloop-helm-home"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    return subprocess.run(
        [require_helm(), *args], capture_output=True, text=True, timeout=120, env=env
    )


def render(*args: str, release: str = "t") -> list[dict[str, Any]]:
    """`helm template` of the chart with `args` (e.g. -f FILE, --set K=V), parsed."""
    done = helm("template", release, str(CHART), "--namespace", "agents", *args)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {[(d['kind'], d['metadata']['name']) for d in docs]}"
    return found[0]


def kinds(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(d["kind"], d["metadata"]["name"]) for d in docs}
