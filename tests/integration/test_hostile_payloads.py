"""Correctly signed but malformed bodies never get a 5xx: work asked for in a body with a field
of the wrong type or beyond onloop's column limits is refused 400 naming the field, with
nothing recorded; an event ignored anyway is 204. A Hypothesis fuzz over the payload
examples' shapes checks it for mutated types, values, lengths and nesting."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from app.intake.freshness import refreshed
from app.store.db import Database
from app.store.models import Job, Outbox
from tests.doubles.webhooks import (
    counts,
    event_name,
    fixture_names,
    load_fixture,
    signed_headers,
)

Path = tuple[str | int, ...]


def routed_bases() -> list[tuple[str, dict[str, Any]]]:
    """Every payload example, and the ones that reach a job made so (fix label, a command on
    a PR, failed runs), each stamped now so that none is ignored for its age."""
    now = datetime.now(UTC)
    bases = [(event_name(n), load_fixture(n)) for n in fixture_names()]
    labeled = load_fixture("issues.labeled.with-organization")
    labeled["label"]["name"] = "agent:fix"
    comment = load_fixture("issue_comment.created.with-installation")
    comment["issue"]["pull_request"] = {"url": "https://api.github.com/repos/o/r/pulls/1"}
    comment["comment"]["body"] = "/agent rebase"
    help_ = json.loads(json.dumps(comment))
    help_["comment"]["body"] = "/agent help"
    suite = load_fixture("check_suite.completed")
    suite["check_suite"]["conclusion"] = "failure"
    run = load_fixture("workflow_run.completed.with-pull-requests")
    run["workflow_run"]["conclusion"] = "failure"
    bases += [("issues", labeled), ("issue_comment", comment), ("issue_comment", help_)]
    bases += [("check_suite", suite), ("workflow_run", run)]
    return [(name, refreshed(data, name, now)) for name, data in bases]


BASES = routed_bases()


def paths(node: Any, path: Path = ()) -> list[Path]:
    """Every key path in `node`, lists by their first item."""
    found: list[Path] = []
    if isinstance(node, dict):
        for key, value in node.items():
            found += [(*path, key), *paths(value, (*path, key))]
    elif isinstance(node, list) and node:
        found += [(*path, 0), *paths(node[0], (*path, 0))]
    return found


def put(node: Any, path: Path, value: object) -> Any:
    key, rest = path[0], path[1:]
    if isinstance(key, int):
        items = list(node) if isinstance(node, list) and node else [{}]
        items[0] = put(items[0], rest, value) if rest else value
        return items
    copy = dict(node) if isinstance(node, dict) else {}
    copy[key] = put(copy.get(key), rest, value) if rest else value
    return copy


DEEP = "__deep__"  # replaced in the encoded body by a nesting json.dumps could not write
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([2**31, 2**31 - 1, 2**63, 2**63 - 1, -1, -(2**63) - 1, 10**30]),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.sampled_from(["7", "1e3", "", "\x00", "\ud800", "a" * 101, "o/" + "r" * 250, "[bot]"]),
    st.integers(0, 400).map(lambda n: "x" * n),
    st.just(DEEP),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


def post(client: Any, name: str, data: dict[str, Any], depth: int = 0) -> Any:
    body = json.dumps(data)
    if depth:
        body = body.replace(json.dumps(DEEP), "[" * depth + "]" * depth)
    raw = body.encode()  # json.dumps sends a lone surrogate as its \u escape
    return client.post("/webhooks/github", data=raw, headers=signed_headers(raw, name))


def whole(db: Database) -> None:
    """Nothing half-recorded: every job has its outbox row and its delivery."""
    with db.read() as s:
        jobs = s.scalar(select(func.count()).select_from(Job)) or 0
        queued = s.scalar(select(func.count(func.distinct(Outbox.job_id)))) or 0
        orphans = s.scalar(select(func.count()).where(Job.delivery_row_id.is_(None))) or 0
    assert (jobs, orphans) == (queued, 0)


@settings(
    max_examples=200,
    database=None,  # no .hypothesis directory in the checkout
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_fuzzed_payloads_never_get_a_5xx(client: Any, db: Database, data: st.DataObject) -> None:
    name, base = data.draw(st.sampled_from(BASES), label="base")
    mutated = base
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        path = data.draw(st.sampled_from(paths(mutated) or [("action",)]), label="path")
        mutated = put(mutated, path, data.draw(values, label="value"))
    depth = data.draw(st.sampled_from([0, 0, 50, 5000, 100_000]), label="depth")
    before = counts(db)
    response = post(client, name, mutated, depth)
    after = counts(db)
    event(f"status {response.status_code}")
    assert response.status_code in (200, 202, 204, 400), response.get_data(as_text=True)
    if response.status_code == 400:
        assert after == before, response.json
        assert response.json["error"]
    else:
        assert after["deliveries"] == before["deliveries"] + 1
    if response.status_code in (200, 204):
        assert (after["jobs"], after["outbox"]) == (before["jobs"], before["outbox"])
    whole(db)


def comment_command(**changes: Any) -> dict[str, Any]:
    data = next(d for n, d in BASES if n == "issue_comment" and "/agent rebase" in str(d))
    data = json.loads(json.dumps(data))
    for dotted, value in changes.items():
        data = put(data, tuple(dotted.split(".")), value)
    return data


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("installation", "957387"),
        ("installation", [957387]),
        ("installation.id", "957387"),
        ("installation.id", 2**64),
        ("repository.id", 2**63),
        ("sender.login", "a" * 101),
        ("sender.id", "1"),
        ("comment.id", -5),
        ("comment.user", "octocat"),
        ("sender.login", "nul\x00"),
    ],
)
def test_work_from_a_malformed_body_is_400_naming_the_field(
    client: Any, db: Database, field: str, value: object
) -> None:
    response = post(client, "issue_comment", comment_command(**{field: value}))
    assert response.status_code == 400, response.get_data(as_text=True)
    assert field in response.json["error"]
    assert sum(counts(db).values()) == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("repository.full_name", "o/" + "r" * 250),
        ("repository", ["o/r"]),
        ("repository", "Codertocat"),
        ("comment.body", 7),  # not an /agent command
        ("issue.pull_request", "yes"),  # not on a pull request
        ("issue.number", 2**31),  # no number
        ("issue.number", "1"),
    ],
)
def test_an_ignored_event_with_a_bad_field_is_204(
    client: Any, db: Database, field: str, value: object
) -> None:
    response = post(client, "issue_comment", comment_command(**{field: value}))
    assert response.status_code == 204
    assert (counts(db)["deliveries"], counts(db)["jobs"]) == (1, 0)


def test_a_huge_id_on_an_ignored_event_is_recorded_without_it(client: Any, db: Database) -> None:
    data = {"zen": "Keep it logically awesome.", "installation": {"id": 2**70}}
    data["repository"] = {"full_name": "o/" + "r" * 300}
    response = post(client, "ping", data)
    assert response.status_code == 204
    assert counts(db)["deliveries"] == 1
