"""Sandbox, repository cache and git credential tests."""
