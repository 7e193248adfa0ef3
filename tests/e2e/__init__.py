"""End-to-end tests: web, worker, sandboxes and git against the GitHub double."""
