"""The worker side: the Celery app, job entry points, sandboxes, git and reporting."""
