"""The organisation file's keys for untrusted heads and private indexes: a repository's own
`.github/onloop.yml` can never set them."""

from __future__ import annotations

import pytest

from app.policy.org_config import effective_config, parse_org_config
from app.policy.repo_config import ConfigError, UntrustedEgress, parse_repo_config


def test_untrusted_heads_get_no_egress_and_no_private_index_by_default() -> None:
    config = parse_org_config("sandbox:\n  egress: [pypi]\n")
    assert config.sandbox.untrusted_egress is UntrustedEgress.NONE
    assert config.sandbox.private_indexes == []


def test_only_the_organisation_file_sets_them() -> None:
    org = parse_org_config(
        "sandbox:\n  egress: [pypi, 'http://10.1.2.3:8080/simple/']\n"
        "  untrusted_egress: public\n  private_indexes: ['http://10.1.2.3:8080']\n"
    )
    assert org.sandbox.untrusted_egress is UntrustedEgress.PUBLIC
    repo, unknown = parse_repo_config(
        "sandbox:\n  setup: make\n  untrusted_egress: public\n"
        "  private_indexes: ['169.254.169.254', 'pkgs.evil.test']\n"
    )
    # ignored, and reported back (tasks.runner.repo_settings.LoadedConfig.org_only)
    assert unknown == ["sandbox.untrusted_egress", "sandbox.private_indexes"]
    strict = effective_config(parse_org_config("sandbox:\n  timeout: 600\n"), repo)
    assert strict.sandbox.untrusted_egress is UntrustedEgress.NONE
    assert strict.sandbox.private_indexes == [] and strict.sandbox.setup == "make"
    kept = effective_config(org, repo)
    assert kept.sandbox.untrusted_egress is UntrustedEgress.PUBLIC
    assert kept.sandbox.private_indexes == ["http://10.1.2.3:8080"]


def test_a_bad_value_names_the_key() -> None:
    with pytest.raises(ConfigError, match="untrusted_egress"):
        parse_org_config("sandbox:\n  untrusted_egress: everything\n")
