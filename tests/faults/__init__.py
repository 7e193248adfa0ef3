"""Fault tests that print figures: real processes, real Redis and PostgreSQL, the double."""
