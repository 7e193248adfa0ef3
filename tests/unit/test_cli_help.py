"""`onloop --version`, `-h`, and a top-level help that gives each command's whole summary."""

from __future__ import annotations

from importlib.metadata import version

from click.testing import CliRunner

from app.cli.main import main


def test_version_and_short_help_option() -> None:
    runner = CliRunner()
    shown = runner.invoke(main, ["--version"])
    assert shown.exit_code == 0 and shown.output == f"onloop, version {version('onloop')}\n"
    short = runner.invoke(main, ["-h"])
    assert short.exit_code == 0 and "Commands:" in short.output
    assert runner.invoke(main, ["replay", "-h"]).exit_code == 0


def test_top_level_help_gives_each_commands_whole_summary() -> None:
    output = " ".join(CliRunner().invoke(main, ["--help"]).output.split())
    assert "..." not in output.split("Commands:", 1)[1]
    for command in main.commands.values():
        summary = " ".join(command.get_short_help_str(limit=1000).split())
        assert summary in output, summary
