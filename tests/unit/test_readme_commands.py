"""README's command table names every command and every option that `--help` shows."""

from __future__ import annotations

import re
from pathlib import Path

import click

from app.cli.main import main

README = Path(__file__).resolve().parents[2] / "README.md"


def commands(group: click.Group, prefix: str = "onloop") -> list[tuple[str, click.Command]]:
    found: list[tuple[str, click.Command]] = []
    for name, command in sorted(group.commands.items()):
        path = f"{prefix} {name}"
        if isinstance(command, click.Group):
            found += commands(command, path)
        else:
            found.append((path, command))
    return found


def rows() -> dict[str, str]:
    """Each row of the command table, by the command it starts with."""
    table: dict[str, str] = {}
    for line in README.read_text().splitlines():
        match = re.match(r"\| `(onloop [a-z][a-z -]*?)(?: [A-Z\[`-]|`)", line)
        if match:
            table[match.group(1).strip()] = table.get(match.group(1).strip(), "") + line
    return table


def test_every_command_and_option_is_in_the_readme_table() -> None:
    table = rows()
    missing = []
    for path, command in commands(main):
        row = table.get(path)
        if row is None:
            missing.append(path)
            continue
        for param in command.params:
            if isinstance(param, click.Option):
                for option in param.opts + param.secondary_opts:
                    if option.startswith("--") and option != "--help" and option not in row:
                        missing.append(f"{path} {option}")
    assert not missing, "README's command table lacks: " + ", ".join(missing)
