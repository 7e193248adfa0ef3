"""Storage: the database, its models and migrations, and the audit log."""
