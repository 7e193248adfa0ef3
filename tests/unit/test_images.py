"""Sandbox images are the operator's: a repository names one of the allowed ones, never a
host path, another image or onloop's own snapshot of another repository."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.settings import Settings
from app.policy.images import ImageNotAllowed, check_reference, choose_image
from app.policy.org_config import OrgConfigLoader, parse_org_config
from app.policy.repo_config import ConfigError, parse_repo_config
from tasks.runner.outcomes import outcome_of
from tests.doubles.sandboxes import IMAGE

PATHS = ["/", "/srv/onloop", "./rootfs", "../etc", "rootfs/../../etc", "~/.env", ".", "a\\b"]
SNAPSHOT = "onloop-snapshot/other-org-secret-1a2b3c4d:" + "0" * 40


def settings(tmp_path: Path, org: str | None) -> Settings:
    path = None
    if org is not None:
        path = tmp_path / "org.yml"
        path.write_text(org)
    return Settings(_env_file=None, config_file=path)  # type: ignore[call-arg]


@pytest.mark.parametrize("path", PATHS)
def test_a_repository_cannot_name_a_host_path_as_its_image(path: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_repo_config(f"sandbox:\n  image: '{path}'\n")
    assert err.value.line == 2 and "sandbox.image" in str(err.value)


@pytest.mark.parametrize(
    "name",
    ["python:3.12-slim", "ghcr.io/acme/ci:1.2", "localhost:5000/x/y", IMAGE, "a__b-c.d:e_1"],
)
def test_image_names_are_docker_references(name: str) -> None:
    assert check_reference(name) == name
    assert parse_repo_config(f"sandbox:\n  image: '{name}'\n")[0].sandbox.image == name


def test_only_the_default_runs_unless_the_operator_lists_more(tmp_path: Path) -> None:
    loader = OrgConfigLoader()
    plain = settings(tmp_path, None)
    assert loader.sandbox_image(plain, None) == IMAGE
    assert loader.sandbox_image(plain, IMAGE) == IMAGE
    with pytest.raises(ImageNotAllowed) as err:
        loader.sandbox_image(plain, "python:3.12-slim")
    message = err.value.message
    assert f"`{IMAGE}`" in message and "`sandbox.images`" in message
    assert "organisation file" in message

    listed = settings(tmp_path, "sandbox:\n  images: [python:3.12-slim, node:22]\n")
    assert loader.images(listed) == (IMAGE, "python:3.12-slim", "node:22")
    assert loader.sandbox_image(listed, "node:22") == "node:22"
    with pytest.raises(ImageNotAllowed):
        loader.sandbox_image(listed, "node:22-slim")  # exact names only
    with pytest.raises(ImageNotAllowed) as err:
        loader.sandbox_image(listed, SNAPSHOT)
    assert "snapshot" in err.value.message


@pytest.mark.parametrize("path", ["/", "/var/lib/onloop/rootfs", "../x"])
def test_a_host_path_is_refused_even_if_validation_was_skipped(path: str) -> None:
    with pytest.raises(ImageNotAllowed):
        choose_image(path, (IMAGE,))


def test_the_organisation_file_lists_images_not_paths_nor_snapshots() -> None:
    for bad, line in (("'/srv/rootfs'", 4), (f"'{SNAPSHOT}'", 4), ("{a: 1}", 4)):
        with pytest.raises(ConfigError) as err:
            parse_org_config(f"sandbox:\n  images:\n    - node:22\n    - {bad}\n")
        assert err.value.line == line, err.value
    with pytest.raises(ConfigError):
        parse_org_config("sandbox:\n  images: node:22\n")
    parse_org_config("sandbox:\n  images: [node:22]\n")


def test_a_repository_cannot_widen_the_list_itself() -> None:
    _, unknown = parse_repo_config("sandbox:\n  images: [evil:latest]\n")
    assert unknown == ["sandbox.images"]  # reported back to the repository as unknown


def test_a_refused_image_fails_the_job_with_its_own_message(tmp_path: Path) -> None:
    with pytest.raises(ImageNotAllowed) as err:
        OrgConfigLoader().sandbox_image(settings(tmp_path, None), "python:3.12-slim")
    state, result = outcome_of(err.value, None)  # type: ignore[arg-type]
    assert state == "failed" and result["error"] == err.value.message
    assert "crashed" not in result
