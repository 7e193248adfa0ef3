"""Typed payload reads: every field `decide` reads, given a value of each wrong JSON type, reads
as absent, and `decide` answers with an ignore reason or an action instead of raising."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, get_args, get_origin, get_type_hints, is_typeddict

import pytest

from app.intake.decide import Action, Ignored, decide, explain
from app.intake.events import BadRequest, Event
from app.intake.payloads import Payload, read_payload
from app.policy.repo_config import RepoConfig
from tests.doubles.webhooks import SECRET, load_fixture, signed_headers

Path = tuple[str | int, ...]  # keys, and 0 for "the first item of a list"
ABSENT = object()
# One value of each JSON type, and some that are right only on the surface: a number in a
# string, a bool where a number goes, a list of numbers where a list of objects goes.
VALUES: tuple[object, ...] = ("7", "", 7, 0, True, 1.5, None, [], [1], {}, {"id": "x"})


def fields(hint: object, path: Path = ()) -> Iterator[tuple[Path, object]]:
    """Every field under `hint` (a TypedDict) with its annotation, depth first."""
    for key, field in get_type_hints(hint).items():
        yield (*path, key), field
        if is_typeddict(field):
            yield from fields(field, (*path, key))
        elif get_origin(field) is list:
            yield from fields(get_args(field)[0], (*path, key, 0))


FIELDS = dict(fields(Payload))


def right_type(hint: object, value: object) -> bool:
    if hint is int:
        return type(value) is int
    if hint is bool:
        return type(value) is bool
    if hint is str:
        return isinstance(value, str)
    if get_origin(hint) is list:
        return isinstance(value, list)
    return is_typeddict(hint) and isinstance(value, dict)


def put(node: Any, path: Path, value: object) -> Any:
    """A copy of `node` with `value` at `path`, making the objects and lists on the way."""
    key, rest = path[0], path[1:]
    if isinstance(key, int):
        items = list(node) if isinstance(node, list) and node else [{}]
        items[0] = put(items[0], rest, value) if rest else value
        return items
    copy = dict(node) if isinstance(node, dict) else {}
    copy[key] = put(copy.get(key), rest, value) if rest else value
    return copy


def get(node: Any, path: Path) -> object:
    for key in path:
        if isinstance(key, int):
            if not isinstance(node, list) or not node:
                return ABSENT
            node = node[0]
        elif isinstance(node, dict) and key in node:
            node = node[key]
        else:
            return ABSENT
    return node


def failed(fixture: str, name: str) -> dict[str, Any]:
    data = load_fixture(fixture)
    data[name]["conclusion"] = "failure"
    return data


def bases() -> list[tuple[str, dict[str, Any]]]:
    """A delivery for every route, each as far into its handler as its payload can go."""
    labeled = load_fixture("issues.labeled")
    labeled["label"]["name"] = "agent:fix"
    comment = load_fixture("issue_comment.created.with-installation")
    comment["issue"]["pull_request"] = {"url": "https://api.github.com/repos/o/r/pulls/1"}
    comment["comment"]["body"] = "/agent review"
    matching = failed("workflow_run.completed.with-pull-requests", "workflow_run")
    run = matching["workflow_run"]
    run["pull_requests"][0]["head"] = {"sha": run["head_sha"], "repo": run["head_repository"]}
    closed = load_fixture("pull_request.synchronize")
    closed["action"] = "closed"
    repositories = load_fixture("installation.created")
    repositories["action"] = "added"
    repositories["repositories_added"] = repositories.pop("repositories")
    repositories["repositories_removed"] = [{"id": 1, "full_name": "o/gone"}]
    revoked = {"action": "revoked", "sender": load_fixture("issues.labeled")["sender"]}
    return [
        ("issues", labeled),
        ("issue_comment", comment),
        ("check_suite", failed("check_suite.completed", "check_suite")),
        ("workflow_run", failed("workflow_run.completed", "workflow_run")),
        ("workflow_run", matching),
        ("pull_request", load_fixture("pull_request.synchronize")),
        ("pull_request", closed),
        ("installation", load_fixture("installation.created")),
        ("installation", load_fixture("installation.deleted")),
        ("installation_repositories", repositories),
        ("github_app_authorization", revoked),
    ]


BASES = bases()
ACTIONS = get_args(Action)


def test_the_cases_cover_what_decide_reads() -> None:
    for path in [
        ("installation", "id"),
        ("issue", "number"),
        ("issue", "pull_request"),
        ("comment", "user", "login"),
        ("check_suite", "app", "id"),
        ("workflow_run", "pull_requests", 0, "head", "repo", "id"),
        ("repositories_removed", 0, "full_name"),
    ]:
        assert path in FIELDS
    reached = {type(explain(Event(name, "guid", data), RepoConfig())) for name, data in BASES}
    assert set(ACTIONS) <= reached  # every base gets to the end of its handler


@pytest.mark.parametrize("path", FIELDS, ids=lambda p: ".".join(map(str, p)))
def test_a_wrong_typed_field_reads_as_absent_and_never_raises(path: Path) -> None:
    hint = FIELDS[path]
    for name, data in BASES:
        for value in VALUES:
            event = Event(name, "guid", put(data, path, value))
            read = get(event.payload, path)
            if right_type(hint, value):
                assert read is not ABSENT, (name, value)
            else:
                assert read is ABSENT, (name, value)
            result = explain(event, RepoConfig(), own_app_id=1)
            assert isinstance(result, ACTIONS) or result in Ignored, (name, value, result)
            assert decide(event, RepoConfig()) is None or isinstance(result, ACTIONS)
            assert event.installation_id is None or type(event.installation_id) is int
            assert event.repo is None or isinstance(event.repo, str)
            assert event.action is None or isinstance(event.action, str)
            assert isinstance(event.sender.get("login", ""), str)


def test_wrong_typed_top_level_values_are_ignored() -> None:
    for name, _ in BASES:
        for value in VALUES:
            for key in FIELDS:
                if len(key) == 1:
                    event = Event(name, "guid", {str(key[0]): value})
                    result = explain(event, RepoConfig())
                    assert isinstance(result, ACTIONS) or result in Ignored


def test_what_is_ignored_says_why() -> None:
    labeled = dict(BASES[0][1])
    labeled["issue"] = {**labeled["issue"], "number": "7"}
    assert explain(Event("issues", "g", labeled), RepoConfig()) == Ignored.NO_NUMBER
    created = {**load_fixture("installation.created"), "installation": "957387"}
    assert explain(Event("installation", "g", created), RepoConfig()) == Ignored.NO_INSTALLATION
    revoked = {"action": "revoked", "sender": {"id": True, "login": "alice"}}
    assert explain(Event("github_app_authorization", "g", revoked), RepoConfig()) == (
        Ignored.NO_SENDER
    )
    closed = {**BASES[6][1], "number": "1", "pull_request": {"number": False}}
    assert explain(Event("pull_request", "g", closed), RepoConfig()) == Ignored.NO_NUMBER


def test_read_payload_keeps_only_known_fields_of_the_right_type() -> None:
    data = {
        "action": "labeled",
        "issue": {"number": 3, "milestone": "kept out", "pull_request": {"url": 5}},
        "sender": {"id": True, "login": "alice", "type": 4},
        "repositories": [{"full_name": "o/r"}, "o/s", {"full_name": 6}],
        "unknown": {"a": 1},
    }
    assert read_payload(data) == {
        "action": "labeled",
        "issue": {"number": 3, "pull_request": {}},
        "sender": {"login": "alice"},
        "repositories": [{"full_name": "o/r"}, {}],
    }


def test_ignore_reasons_keep_their_recorded_strings() -> None:
    assert Ignored.UNROUTED == "ignored: event not handled"
    assert Ignored.UNINSTALLED == "ignored: onloop was uninstalled from this account"
    assert Ignored.DUPLICATE == "duplicate delivery"
    assert json.dumps({"outcome": Ignored.CLOSED}) == (
        '{"outcome": "ignored: issue or pull request is closed"}'
    )


def test_a_body_nested_deeper_than_the_recursion_limit_is_a_bad_request() -> None:
    body = b'{"issue": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    with pytest.raises(BadRequest) as caught:
        Event.from_http(signed_headers(body, "issues"), body, secret=SECRET)
    assert caught.value.status == 400
