"""Git in the worker: token-scoped git processes, repository mirrors, the blast-radius guard."""
