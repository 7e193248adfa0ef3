"""CI failures: fetching the failed jobs' logs and parsing them into excerpts."""
