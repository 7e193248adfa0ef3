"""`onloop doctor`: green when everything is there, and the right fix named for each break."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import SecretStr

from app.cli.doctor import run_doctor
from app.core.settings import Settings
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import settings_for
from tests.doubles.plain_image import plain_image
from tests.doubles.redis_server import free_port
from tests.doubles.sandboxes import IMAGE, docker_or_fail, unavailable


@pytest.fixture
def healthy(github_double: GitHubDouble, database_url: str, tmp_path: Path) -> Settings:
    return settings_for(
        github_double,
        tmp_path,
        database_url=database_url,
        redis_url="redis://127.0.0.1:6379/9",
        sandbox_backend="local",
    )


def doctor(settings: Settings, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = run_doctor(settings)
    return code, capsys.readouterr().out


def test_all_green(healthy: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = doctor(healthy, capsys)
    assert code == 0, out
    assert "FAIL" not in out and "JWT accepted, App onloop" in out


@pytest.mark.parametrize(
    ("change", "check", "hint"),
    [
        ({"app_id": None}, "settings", "ONLOOP_APP_ID"),
        ({"webhook_secret": None}, "webhook secret", "ONLOOP_WEBHOOK_SECRET"),
        ({"webhook_secret": SecretStr("short")}, "webhook secret", "long random"),
        (
            {"database_url": "postgresql+psycopg://nobody@127.0.0.1:1/x"},
            "database",
            "ONLOOP_DATABASE_URL",
        ),
        ({"redis_url": None}, "redis", "ONLOOP_REDIS_URL"),
        ({"redis_url": f"redis://127.0.0.1:{free_port()}/0"}, "redis", "start Redis"),
        ({"app_id": 999}, "github app", "ONLOOP_APP_ID matches the key"),
        ({"private_key_path": Path("/nonexistent.pem")}, "github app", "download the App's key"),
        ({"app_slug": "someone-else"}, "github app", "ONLOOP_APP_SLUG=onloop"),
        (
            {"sandbox_backend": "docker", "sandbox_image": "onloop-no-such-image:0"},
            "docker",
            "onloop sandbox build-image",
        ),
    ],
)
def test_each_break_names_its_fix(
    healthy: Settings,
    capsys: pytest.CaptureFixture[str],
    change: dict[str, object],
    check: str,
    hint: str,
) -> None:
    code, out = doctor(healthy.model_copy(update=change), capsys)
    assert code == 1
    failing = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert any(line.startswith(f"FAIL {check}:") and hint in line for line in failing), out


def test_an_app_made_before_onloop_listened_to_reviews_is_told_what_to_subscribe_to(
    healthy: Settings, github_double: GitHubDouble, capsys: pytest.CaptureFixture[str]
) -> None:
    github_double.app.events.remove("pull_request_review")
    try:
        code, out = doctor(healthy, capsys)
    finally:
        github_double.app.events.append("pull_request_review")
    assert code == 1
    line = next(line for line in out.splitlines() if line.startswith("FAIL github app:"))
    assert "does not subscribe to pull_request_review" in line and "Subscribe to events" in line


def test_docker_daemon_down_names_its_fix(
    healthy: Settings, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{healthy.work_dir.resolve()}/no-docker.sock")
    code, out = doctor(healthy.model_copy(update={"sandbox_backend": "docker"}), capsys)
    assert code == 1
    assert any(
        line.startswith("FAIL docker:") and "start dockerd" in line for line in out.splitlines()
    ), out


def test_unmigrated_database(
    healthy: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = doctor(
        healthy.model_copy(update={"database_url": f"sqlite:///{tmp_path}/new.db"}), capsys
    )
    assert code == 1 and "onloop db upgrade" in out


def test_private_index_settings_are_checked_without_showing_them(
    healthy: Settings, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from tasks.sandbox.egress.tls import make_job_tls

    creds, ca = tmp_path / "creds.yml", tmp_path / "ca.pem"
    creds.write_text("https://pkgs.example.com: {username: u, password: hunter2-secret}\n")
    ca.write_bytes(make_job_tls(["pkgs.example.com"]).ca_pem)
    good = healthy.model_copy(update={"egress_credentials_file": creds, "egress_ca_file": ca})
    code, out = doctor(good, capsys)
    assert code == 0, out
    assert "ok   egress: credentials for 1 index(es), 1 private index CA(s)" in out
    for broken, hint in (
        ("https://pkgs.example.com: {username: u, password: hunter2-secret\n", "README"),
        ("https://pkgs.example.com: hunter2-secret\n", "README"),
    ):
        creds.write_text(broken)
        code, out = doctor(good, capsys)
        assert code == 1 and "FAIL egress: ONLOOP_EGRESS_CREDENTIALS_FILE" in out, out
        assert hint in out and "hunter2" not in out, out
    creds.write_text("{}\n")
    ca.write_bytes(make_job_tls(["pkgs.example.com"]).key_pem)  # a key, not a certificate
    code, out = doctor(good, capsys)
    assert "FAIL egress: ONLOOP_EGRESS_CA_FILE: not a PEM bundle" in out, out
    assert "PRIVATE" not in out
    missing = good.model_copy(update={"egress_ca_file": tmp_path / "nope.pem"})
    code, out = doctor(missing, capsys)
    assert code == 1 and "ONLOOP_EGRESS_CA_FILE: No such file" in out, out


@pytest.mark.timeout(60)  # the old client retried with backoff for about six minutes
def test_unreachable_github_is_not_a_refused_jwt(
    healthy: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    api_url = f"http://127.0.0.1:{free_port()}/api/v3"  # nothing listens there
    code, out = doctor(healthy.model_copy(update={"github_api_url": api_url}), capsys)
    assert code == 1
    line = next(line for line in out.splitlines() if line.startswith("FAIL github app:"))
    assert f"cannot reach GitHub at {api_url}: " in line, out
    assert "Connection refused" in line and "ONLOOP_GITHUB_API_URL / network" in line, out
    assert "JWT" not in line and "ONLOOP_APP_ID" not in line, out


def test_org_config_file_is_checked_with_its_line(
    healthy: Settings, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out = doctor(healthy, capsys)
    assert "ok   org config: no ONLOOP_CONFIG_FILE" in out, out
    org = tmp_path / "org.yml"
    configured = healthy.model_copy(update={"config_file": org})
    code, out = doctor(configured, capsys)
    assert code == 1 and f"FAIL org config: ONLOOP_CONFIG_FILE: {org}: " in out, out
    assert "no such file" in out.lower() and "check the path" in out, out
    org.write_text("max_ci_fix_attempts: 2\nauto_fix_cl: true\n")  # a typo on line 2
    code, out = doctor(configured, capsys)
    assert code == 1, out
    assert f"FAIL org config: ONLOOP_CONFIG_FILE: {org}, line 2: unknown key" in out, out
    org.write_text("commands: [review]\nauto_fix_ci: true\n  oops: x\n")  # not YAML
    code, out = doctor(configured, capsys)
    assert code == 1 and f"{org}, line 3" in out and "not valid YAML" in out, out
    org.write_text("max_ci_fix_attempts: 2\nauto_fix_ci: true\n")
    code, out = doctor(configured, capsys)
    assert code == 0 and f"ok   org config: {org} is valid" in out, out


@pytest.mark.docker
def test_a_sandbox_image_without_the_setup_tools_fails_and_is_named(
    healthy: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    """An ONLOOP_SANDBOX_IMAGE not built by `onloop sandbox build-image` makes every job with
    a `sandbox.setup` fail: doctor runs the self-check in it and says so."""
    client = docker_or_fail()
    try:
        client.images.get(IMAGE)
    except Exception:
        unavailable(f"{IMAGE} missing: run `onloop sandbox build-image`")
    with plain_image(client, IMAGE) as plain:
        code, out = doctor(
            healthy.model_copy(update={"sandbox_backend": "docker", "sandbox_image": plain}), capsys
        )
    assert code == 1, out
    line = next(line for line in out.splitlines() if line.startswith("FAIL docker:"))
    assert plain in line and "onloop sandbox build-image" in line and "/opt/tools" in line
    code, out = doctor(
        healthy.model_copy(update={"sandbox_backend": "docker", "sandbox_image": IMAGE}), capsys
    )
    assert f"ok   docker: daemon up, image {IMAGE} present, self-check ok" in out, out


@pytest.mark.parametrize(
    ("environ", "line"),
    [
        ({}, "ok   traces: off (no OTEL_* variable switches them on)"),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://user:secret@collector.example:4318/x"},
            "ok   traces: on: OTLP/HTTP to https://collector.example:4318",
        ),
        ({"OTEL_TRACES_EXPORTER": "console"}, "ok   traces: on: printed on standard output"),
        (
            {"OTEL_TRACES_EXPORTER": "jaeger"},
            "FAIL traces: OTEL_TRACES_EXPORTER=jaeger: onloop supports one of otlp, console, none",
        ),
    ],
)
def test_doctor_says_whether_traces_are_on(
    environ: dict[str, str],
    line: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in [k for k in os.environ if k.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    run_doctor(Settings(database_url=f"sqlite:///{tmp_path}/none.db", sandbox_backend="local"))
    (found,) = [x for x in capsys.readouterr().out.splitlines() if " traces: " in x]
    assert found.startswith(line), found
    assert "secret" not in found and "user" not in found
