"""POST /api/graphql: the query is read (graphql_parse.py) and run against the few root fields
the double knows; the answer holds only the fields asked for, errors as GitHub gives them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.doubles.github.api import ApiError, Ctx, Response
from tests.doubles.github.graphql_parse import Field, ParseError, parse, resolve
from tests.doubles.github.handlers import commit_on_branch, graphql_threads
from tests.doubles.github.handlers.graphql_threads import GraphQLError

Obj = dict[str, Any]  # "__typename" and fields: values, or callables taking the arguments


class _Undefined(Exception):
    def __init__(self, f: Field, type_name: str, path: list[Any]) -> None:
        super().__init__(f"Field '{f.name}' doesn't exist on type '{type_name}'")
        self.field, self.type_name, self.path = f, type_name, path


class _Run:
    def __init__(self, variables: dict[str, Any], defaults: dict[str, Any]) -> None:
        self.variables, self.defaults = variables, defaults
        self.errors: list[dict[str, Any]] = []

    def select(self, obj: Obj, fields: list[Field], path: list[Any]) -> Obj:
        out: Obj = {}
        for f in fields:
            here = [*path, f.key]
            if f.name == "__typename":
                out[f.key] = obj.get("__typename")
                continue
            if f.name not in obj:
                raise _Undefined(f, str(obj.get("__typename", "Object")), here)
            value = obj[f.name]
            try:
                if callable(value):
                    value = value(resolve(f.args, self.variables, self.defaults))
            except GraphQLError as exc:
                self.errors.append(
                    {
                        "type": exc.type,
                        "path": here,
                        "locations": [{"line": f.line, "column": f.column}],
                        "message": exc.message,
                    }
                )
                out[f.key] = None
                continue
            out[f.key] = self.complete(value, f, here)
        return out

    def complete(self, value: Any, f: Field, path: list[Any]) -> Any:
        if value is None or not f.selections:
            return value
        if isinstance(value, list):
            return [self.complete(v, f, [*path, i]) for i, v in enumerate(value)]
        return self.select(value, f.selections, path)


def _commit_on_branch(ctx: Ctx) -> Callable[[dict[str, Any]], Any]:
    def run(args: dict[str, Any]) -> Any:
        answer = commit_on_branch.create_commit_on_branch(ctx, args.get("input") or {})
        body = answer.body or {}
        if body.get("errors"):
            first = body["errors"][0]
            raise GraphQLError(first["type"], first["message"])
        return body["data"]["createCommitOnBranch"]

    return run


def _roots(ctx: Ctx) -> dict[str, Obj]:
    return {
        "query": {"__typename": "Query", **graphql_threads.query_fields(ctx)},
        "mutation": {
            "__typename": "Mutation",
            "createCommitOnBranch": _commit_on_branch(ctx),
            **graphql_threads.mutation_fields(ctx),
        },
    }


def _failed(message: str, **extra: Any) -> Response:
    return Response(200, {"errors": [{"message": message, **extra}]})


def graphql(ctx: Ctx) -> Response:
    """Run one operation; HTTP 200 with `errors` for what GitHub answers that way."""
    if ctx.identity.kind == "none":  # GitHub's GraphQL API has no anonymous access
        raise ApiError(401, "This endpoint requires you to be authenticated.")
    body = ctx.body_dict()
    variables = body.get("variables") or {}
    if not isinstance(variables, dict):
        return _failed("Variables are invalid JSON.")
    try:
        op = parse(str(body.get("query") or ""), body.get("operationName"))
    except ParseError as exc:
        return _failed(str(exc))
    run = _Run(variables, op.defaults)
    try:
        data = run.select(_roots(ctx)[op.kind], op.selections, [])
    except _Undefined as exc:  # GitHub validates first: no data at all
        return _failed(
            str(exc),
            path=[op.kind, *exc.path],
            extensions={
                "code": "undefinedField",
                "typeName": exc.type_name,
                "fieldName": exc.field.name,
            },
            locations=[{"line": exc.field.line, "column": exc.field.column}],
        )
    answer: dict[str, Any] = {"data": data}
    if run.errors:
        answer["errors"] = run.errors
    return Response(200, answer)
