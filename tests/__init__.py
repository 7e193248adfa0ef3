"""onloop tests."""
