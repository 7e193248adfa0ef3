"""Integration tests: real Redis, database, Docker and git, one part at a time."""
