"""A GitHub double for tests: REST shapes PyGithub parses, app JWTs, tokens, git over HTTP."""

from tests.doubles.github.double import WEBHOOK_SECRET, GitHubDouble

__all__ = ["WEBHOOK_SECRET", "GitHubDouble"]
