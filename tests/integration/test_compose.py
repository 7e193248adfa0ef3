"""docker-compose.yml, the Dockerfile and .dockerignore, read and checked as files (no registry
here to pull base images from, so nothing is built or started)."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.core.settings import Settings
from app.web import create_app

ROOT = Path(__file__).resolve().parents[2]
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
ONLOOP = ("migrate", "web", "worker", "beat", "sandbox-image")
SECRET_NAME = re.compile(r"SECRET|PASSWORD|TOKEN|_KEY$|PRIVATE", re.I)
REFERENCE = re.compile(r"^\$\{[A-Z_]+(:\?[^}]*)?\}$")


def env(service: str) -> dict[str, str]:
    return {k: str(v) for k, v in (SERVICES[service].get("environment") or {}).items()}


def mounts(service: str) -> dict[str, str]:
    """volume name → path in the container"""
    out = {}
    for entry in SERVICES[service].get("volumes") or []:
        source, target = entry.split(":")[:2]
        out[source] = target
    return out


def healthcheck(service: str) -> str:
    test = SERVICES[service]["healthcheck"]["test"]
    return " ".join(test[1:])


def test_services_and_images() -> None:
    assert set(SERVICES) == {*ONLOOP, "app-key", "docker", "redis", "postgres"}
    for name in (*ONLOOP, "app-key"):
        assert SERVICES[name]["image"] == "onloop:local"
        assert SERVICES[name]["build"] == "."
    assert SERVICES["web"]["command"] == ["web", "--bind", "0.0.0.0:8000"]
    assert SERVICES["worker"]["command"][0] == "worker"
    assert SERVICES["beat"]["command"] == ["beat"]
    assert SERVICES["migrate"]["command"] == ["db", "upgrade"]
    assert SERVICES["sandbox-image"]["command"] == ["sandbox", "build-image"]
    assert re.fullmatch(r"docker:\d+-dind", SERVICES["docker"]["image"])
    assert SERVICES["docker"]["privileged"] is True
    assert SERVICES["redis"]["image"].startswith("redis:")
    assert SERVICES["postgres"]["image"].startswith("postgres:")
    # only the web is published, and only on loopback (a TLS proxy goes in front)
    published = {n: s["ports"] for n, s in SERVICES.items() if "ports" in s}
    assert published == {"web": ["127.0.0.1:8000:8000"]}


def test_startup_order_waits_for_health_and_one_shot_steps() -> None:
    def needs(service: str) -> dict[str, str]:
        return {k: v["condition"] for k, v in SERVICES[service]["depends_on"].items()}

    for name in ("web", "worker", "beat"):
        assert needs(name)["migrate"] == "service_completed_successfully"
        assert needs(name)["app-key"] == "service_completed_successfully"
        assert needs(name)["redis"] == "service_healthy"
    assert needs("migrate") == {"postgres": "service_healthy"}
    assert needs("worker")["sandbox-image"] == "service_completed_successfully"
    assert needs("sandbox-image") == {"docker": "service_healthy"}
    for one_shot in ("migrate", "sandbox-image", "app-key"):
        assert SERVICES[one_shot]["restart"] == "no"


def test_health_checks() -> None:
    assert "http://127.0.0.1:8000/readyz" in healthcheck("web")
    assert healthcheck("redis") == "redis-cli ping"
    assert healthcheck("postgres").startswith("pg_isready -U onloop")
    assert healthcheck("docker") == "docker version"
    # the worker answers Celery's ping under the node name `onloop worker` gives itself
    assert 'inspect ping -d "onloop@$$HOSTNAME"' in healthcheck("worker")
    assert 'f"--hostname=onloop@{socket.gethostname()}"' in (ROOT / "tasks/worker.py").read_text()
    # the routes the probes hit exist
    app = create_app(Settings(_env_file=None, database_url="sqlite://"))  # type: ignore[call-arg]
    assert {"/healthz", "/readyz"} <= {r.rule for r in app.url_map.iter_rules()}


def test_volumes() -> None:
    assert set(COMPOSE["volumes"]) == {"keys", "redis-data", "postgres-data", "docker-data", "work"}
    assert mounts("postgres") == {"postgres-data": "/var/lib/postgresql/data"}
    assert mounts("redis") == {"redis-data": "/data"}
    assert mounts("docker")["docker-data"] == "/var/lib/docker"
    for name in ("web", "worker", "beat"):
        assert mounts(name)["keys"] == "/var/lib/onloop/keys"
        assert SERVICES[name]["volumes"][0].endswith(":ro")
    assert mounts("app-key") == {"keys": "/keys"}
    key_path = SERVICES["app-key"]["command"][0].split()[-1]
    assert key_path == "/keys/github-app.pem"
    assert env("web")["ONLOOP_PRIVATE_KEY_PATH"] == "/var/lib/onloop/keys/github-app.pem"


def test_redis_keeps_its_queue_across_a_restart() -> None:
    """An append-only file, fsync every second, on its volume: a restarted Redis still has
    the queued job messages (the worker re-sends whatever the last second lost)."""
    command = SERVICES["redis"]["command"]
    options = dict(zip(command[1::2], command[2::2], strict=True))
    assert options["--appendonly"] == "yes"
    assert options["--appendfsync"] == "everysec"
    assert options["--dir"] == "/data"


def test_worker_reaches_the_docker_daemon_and_nothing_else_does() -> None:
    assert env("worker")["DOCKER_HOST"] == "tcp://docker:2375"
    assert "--host=tcp://0.0.0.0:2375" in SERVICES["docker"]["command"]
    networks = {n: set(s.get("networks") or []) for n, s in SERVICES.items()}
    assert "docker-api" in networks["worker"] & networks["docker"]
    on_api = {n for n, nets in networks.items() if "docker-api" in nets}
    assert on_api == {"worker", "docker", "sandbox-image"}
    assert COMPOSE["networks"]["docker-api"]["internal"] is True
    assert {n for n, nets in networks.items() if "docker-egress" in nets} == {"docker"}
    # sandboxes bind-mount their workspace, resolved by the daemon: same volume, same path
    work = env("worker")["ONLOOP_WORK_DIR"]
    assert mounts("worker")["work"] == mounts("docker")["work"] == work
    assert "install -d -o 10001 -g 10001 " + work in " ".join(SERVICES["docker"]["entrypoint"])


def test_no_secret_value_is_inline() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    for name, service in SERVICES.items():
        for key, value in env(name).items():
            if SECRET_NAME.search(key) and not key.endswith(("_PATH", "_CERTDIR")):
                assert REFERENCE.match(value), f"{name}: {key} is set inline"
        if name in ONLOOP:
            assert service["env_file"] == [".env"]
    url = env("web")["ONLOOP_DATABASE_URL"]
    password = url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    assert REFERENCE.match(password)
    for name in ("ONLOOP_WEBHOOK_SECRET", "ONLOOP_CLIENT_SECRET", "ONLOOP_SECRET_KEY"):
        assert name not in text  # from .env only
    used = set(re.findall(r"\$\{([A-Z_]+)", text))
    assert used == {"POSTGRES_PASSWORD", "ONLOOP_PRIVATE_KEY_PATH", "ONLOOP_PUBLIC_URL"}
    assert COMPOSE["secrets"]["github-app-key"]["file"].startswith("${ONLOOP_PRIVATE_KEY_PATH:?")
    assert ".env" in (ROOT / ".gitignore").read_text().split()


# --- the image ---------------------------------------------------------------------------------
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def instructions() -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", DOCKERFILE)
    out = []
    for line in joined.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last:]


def test_dockerfile_is_multi_stage_and_installs_the_package() -> None:
    froms = [rest for word, rest in instructions() if word == "FROM"]
    assert froms == ["python:3.12-slim AS build", "python:3.12-slim"]
    runs = " ".join(rest for word, rest in instructions() if word == "RUN")
    assert "pip install --no-deps -e ." in runs
    copied = {rest.split()[0] for word, rest in instructions() if word == "COPY"}
    assert {"pyproject.toml", "app", "tasks", "config"} <= copied
    assert "git" in " ".join(rest for word, rest in final_stage() if word == "RUN")


def test_image_runs_onloop_as_a_non_root_user() -> None:
    stage = final_stage()
    users = [rest for word, rest in stage if word == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert ("ENTRYPOINT", '["onloop"]') in stage
    assert ("CMD", '["web", "--bind", "0.0.0.0:8000"]') in stage
    assert ("EXPOSE", "8000") in stage
    env_text = " ".join(rest for word, rest in stage if word == "ENV")
    assert "ONLOOP_WORK_DIR=" + env("worker")["ONLOOP_WORK_DIR"] in env_text
    uid = users[-1].split(":")[0]
    assert f"install -o {uid} -g {uid}" in SERVICES["app-key"]["command"][0]


@pytest.mark.parametrize(
    ("path", "included"),
    [
        ("app/cli/main.py", True),
        ("tasks/runner/run.py", True),
        ("config/gunicorn.conf.py", True),
        ("pyproject.toml", True),
        ("README.md", True),
        (".env", False),
        ("github-app.private-key.pem", False),
        (".git/config", False),
        ("var/onloop.db", False),
        ("tests/integration/test_cli.py", False),
        ("app/__pycache__/cli.cpython-312.pyc", False),
    ],
)
def test_dockerignore_keeps_secrets_and_junk_out_of_the_build(path: str, included: bool) -> None:
    patterns = [
        p.strip().rstrip("/")
        for p in (ROOT / ".dockerignore").read_text().splitlines()
        if p.strip() and not p.startswith("#")
    ]
    parts = Path(path).parts
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = any(
        fnmatch.fnmatch(prefix, pattern.removeprefix("**/"))
        or fnmatch.fnmatch(Path(prefix).name, pattern.removeprefix("**/"))
        for pattern in patterns
        for prefix in prefixes
    )
    assert ignored is not included


def test_the_public_url_is_required_with_a_clear_message() -> None:
    for name in ONLOOP:
        value = env(name)["ONLOOP_PUBLIC_URL"]
        assert value.startswith("${ONLOOP_PUBLIC_URL:?set ONLOOP_PUBLIC_URL in .env"), value


def test_the_image_declares_its_data_volume() -> None:
    volumes = [rest for word, rest in final_stage() if word == "VOLUME"]
    assert volumes == ['["/var/lib/onloop/var"]']
    workdir = [rest for word, rest in final_stage() if word == "WORKDIR"][-1]
    assert Settings(_env_file=None).database_url == "sqlite:///var/onloop.db"  # type: ignore[call-arg]
    assert workdir == "/var/lib/onloop"  # so var/onloop.db is in that volume
