"""The queue: the Celery app, the outbox dispatcher, redelivery and beat."""
