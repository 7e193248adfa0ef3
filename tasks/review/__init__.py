"""Reviewing a pull request: its changed lines, linter findings and suggestion comments."""
