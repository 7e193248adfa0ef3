"""Unit tests: pure functions, no services."""
