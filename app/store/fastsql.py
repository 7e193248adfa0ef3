"""Hand-written SQL for the webhook path: dialect details, and a request's writes as statements."""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Sequence
from datetime import datetime
from functools import cache
from typing import Any, TypeVar

T = TypeVar("T")
Row = Sequence[Any]  # a row's values, as the driver decodes them
Step = tuple[str, Sequence[object]]  # a statement (as `Sql` gives it) and its parameters
# A request's writes, as a generator: it yields each statement and is sent back that
# statement's rows (none for a statement without RETURNING); what it returns is the answer.
Steps = Generator[Step, Sequence[Row], T]
Work = Callable[[], Steps[T]]


class Read(str):
    """A statement that only reads: a batch of the group commit asks it once for each
    distinct set of parameters, and every request that asked gets those rows
    (app.store.groupcommit)."""

    __slots__ = ()


class Sql:
    """Dialect details for hand-written SQL that the ORM must read back unchanged.

    Statements are written with `%s` for a value and `%j` for JSON text. SQLite gets `?`
    and SQLAlchemy's DateTime text format; PostgreSQL gets a `::json` cast and datetimes.
    """

    def __init__(self, dialect: str) -> None:
        self.sqlite = dialect == "sqlite"

    @cache  # noqa: B019 - one Sql per dialect, statements are module constants
    def __call__(self, statement: str) -> str:
        made = type(statement)  # a Read stays one
        if self.sqlite:
            return made(statement.replace("%j", "?").replace("%s", "?"))
        return made(statement.replace("%j", "%s::json"))

    def ts(self, value: datetime | None) -> Any:
        """A UTC datetime as SQLAlchemy stores it: naive text on SQLite."""
        if value is None or not self.sqlite:
            return value
        return f"{value:%Y-%m-%d %H:%M:%S.%f}"

    @staticmethod
    def json(value: Any) -> str:
        return json.dumps(value)

    @staticmethod
    def loads(value: Any) -> Any:
        """A JSON column as read back: text on SQLite, already parsed by psycopg."""
        return json.loads(value) if isinstance(value, str | bytes) else value
