"""In CI a missing Docker daemon fails the sandbox tests; elsewhere they skip. Backends say
what they cannot enforce."""

from __future__ import annotations

import logging

import pytest

from tests.doubles.sandboxes import docker_or_fail


def test_missing_daemon_fails_in_ci_and_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        docker_or_fail()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception):
        docker_or_fail()


def test_local_backend_says_what_it_cannot_enforce(caplog: pytest.LogCaptureFixture) -> None:
    import shutil

    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap is not installed")
    from tasks.sandbox.factory import get_backend
    from tasks.sandbox.local_backend import LocalBackend

    with caplog.at_level(logging.WARNING):
        backend = get_backend("local")
    assert isinstance(backend, LocalBackend)
    assert any("CPU" in item for item in backend.limitations)
    assert any("host's /usr" in item for item in backend.limitations)
    assert len([r for r in caplog.records if "cannot enforce" in r.getMessage()]) == len(
        backend.limitations
    )
    with pytest.raises(Exception, match="unknown sandbox backend"):
        get_backend("vm")
