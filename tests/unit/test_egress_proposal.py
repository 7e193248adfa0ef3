"""Refused setup egress becomes a proposal: what the organisation lets a repository allow
(exact lines of `.github/onloop.yml`), what only the operator can, and nothing unsafe."""

from __future__ import annotations

import pytest
import yaml

from app.core.kinds import Kind
from app.intake.commands import Command
from app.intake.decide import Ignored, decide, explain
from app.policy.config_edit import EditError, add_egress
from app.policy.egress import EgressIndex
from app.policy.egress_proposal import (
    NOT_LISTED,
    Refused,
    clean_host,
    proposal_json,
    propose,
    refused_from,
    render,
)
from app.policy.repo_config import RepoConfig
from tests.doubles.webhooks import load_fixture
from tests.unit.test_decide import event

BLOCK = """\
# onloop settings
sandbox:
  setup: pip install -r requirements.txt  # deps
  egress:
    - npm   # the JS side
review:
  request_changes: true
"""


def test_a_host_the_organisation_permits_becomes_its_entry_and_others_the_operator_s() -> None:
    refused = [Refused("pypi.org", 443), Refused("evil.example.com", 443)]
    proposal = propose(refused, None, ["npm"])  # no org file: pypi and npm
    assert proposal.entries == ("pypi",)
    assert proposal.allowed == ("pypi.org",)
    assert proposal.operator == ("evil.example.com",)


def test_an_org_url_entry_is_proposed_as_written() -> None:
    org = ["pypi", EgressIndex(url="https://pkgs.example.com/simple/", index="pip")]
    proposal = propose([Refused("pkgs.example.com", 443)], org, ["pypi"])
    assert proposal.entries == (org[1],)
    edit = add_egress("sandbox:\n  egress:\n  - pypi\n", proposal.entries)
    assert edit.added == ("  - {url: https://pkgs.example.com/simple/, index: pip}",)


def test_nothing_is_proposed_when_the_repository_sets_no_list_or_the_host_is_allowed() -> None:
    # No list of its own: it has the organisation's whole list already.
    assert propose([Refused("other.example.com", 443)], None, None).entries == ()
    assert propose([Refused("pypi.org", 443)], None, ["pypi"]) == propose([], None, ["pypi"])


@pytest.mark.parametrize(
    "host", ["10.0.0.5", "127.0.0.1", "169.254.169.254", "::1", "fd00::1", "db.internal"]
)
def test_a_private_address_is_never_proposed_even_when_the_org_lists_it(host: str) -> None:
    shown = f"[{host}]" if ":" in host else host
    org = [f"https://{shown}/simple/"]
    proposal = propose([Refused(clean_host(host) or host, 443)], org, [])
    assert proposal.entries == ()
    assert proposal.operator == (shown,)


def test_a_wildcard_entry_is_never_proposed() -> None:
    proposal = propose([Refused("a.example.com", 443)], ["https://*.example.com/"], [])
    assert proposal.entries == ()


def test_other_refusal_reasons_are_not_proposals() -> None:
    refused = [Refused("pypi.org", 443, "its name does not resolve")]
    assert not propose(refused, None, ["npm"])


@pytest.mark.parametrize(
    "host",
    [
        "evil.com`\n```\n@alice",
        "a b.com",
        "x" * 300,
        "-bad.example.com",
        "*.example.com",
        "localhost\u200b.com",
        "exa_mple.com",
        "1234",
        "",
        7,
        None,
    ],
)
def test_host_names_from_the_sandbox_are_validated_strictly(host: object) -> None:
    assert clean_host(host) is None
    kept, dropped = refused_from([{"host": host, "port": 443, "why": NOT_LISTED}])
    assert kept == [] and dropped == 1


def test_ports_and_reasons_are_validated_too() -> None:
    items = [
        {"host": "a.example.com", "port": 0},
        {"host": "a.example.com", "port": "443"},
        {"host": "a.example.com", "port": True},
        {"host": "a.example.com", "port": 443, "why": "`code`"},
        {"host": "A.Example.com.", "port": 8443},
        "junk",
    ]
    kept, dropped = refused_from(items)
    assert kept == [Refused("a.example.com", 8443)] and dropped == 5


def test_a_block_list_gets_new_lines_and_the_rest_of_the_file_is_kept() -> None:
    edit = add_egress(BLOCK, ["pypi"])
    assert edit.added == ("    - pypi",) and edit.removed == ()
    assert edit.text == BLOCK.replace(
        "    - npm   # the JS side\n", "    - npm   # the JS side\n    - pypi\n"
    )
    assert yaml.safe_load(edit.text)["sandbox"]["egress"] == ["npm", "pypi"]


def test_a_flow_list_gets_the_items_before_its_bracket() -> None:
    text = "sandbox:\n  egress: [npm]  # keep\n  setup: make\n"
    edit = add_egress(text, ["pypi", "https://x.example.com/a b"])
    assert edit.removed == ("  egress: [npm]  # keep",)
    assert edit.added == ('  egress: [npm, pypi, "https://x.example.com/a b"]  # keep',)
    assert edit.text.endswith("  setup: make\n")
    assert add_egress("sandbox: {egress: []}\n", ["pypi"]).text == "sandbox: {egress: [pypi]}\n"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "sandbox:\n  setup: make\n",
        "sandbox:\n  egress: [npm,\n    pypi]\n",
        "sandbox:\n  egress: []\n  egress: [npm]\n  egress: [x]\n: bad",
    ],
)
def test_a_file_that_cannot_be_edited_by_a_small_edit_says_so(text: str) -> None:
    with pytest.raises(EditError):
        add_egress(text, ["pypi"])


def test_the_status_comment_ends_with_the_lines_fenced_and_the_operator_s_hosts() -> None:
    refused = [Refused("pypi.org", 443), Refused("evil.example.com", 8080)]
    data = proposal_json(propose(refused, None, ["npm"]), BLOCK)
    text = render(data)
    assert "```yaml\n    - pypi\n```" in text
    assert "`/agent allow`" in text
    assert "`evil.example.com:8080`" in text and "operator must allow it" in text


def test_rendering_revalidates_what_the_result_holds() -> None:
    data = {"allowed": ["evil.com`@x"], "operator": ["ok.example.com", "@alice\n```"]}
    text = render(data)
    assert "@alice" not in text and "evil.com" not in text
    assert "`ok.example.com`" in text


def test_a_file_onloop_cannot_edit_still_names_the_entries() -> None:
    data = proposal_json(propose([Refused("pypi.org", 443)], None, []), "sandbox: {egress: []}")
    assert data["added"] == ["sandbox: {egress: [pypi]}"]
    data = proposal_json(
        propose([Refused("pypi.org", 443)], None, ["npm"]), "sandbox:\n  egress: [npm,\n pypi]\n"
    )
    assert "error" in data and "by hand" in render(data) and "`pypi`" in render(data)


def test_agent_allow_works_on_an_issue_thread_and_other_verbs_still_do_not() -> None:
    on_issue = load_fixture("issue_comment.created")
    on_issue["comment"]["body"] = "/agent allow"
    command = decide(event("issue_comment", on_issue), RepoConfig())
    assert isinstance(command, Command) and command.kind == Kind.ALLOW
    assert command.numbers == (on_issue["issue"]["number"],)
    on_issue["comment"]["body"] = "/agent review"
    assert explain(event("issue_comment", on_issue), RepoConfig()) == Ignored.NOT_ON_PR
