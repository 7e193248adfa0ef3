"""Celery settings that do not depend on onloop's settings; loaded by tasks.queue.celery_app.

Delivery guarantees: a task is acknowledged only after it ran (`acks_late`), and requeued when
its worker dies (`task_reject_on_worker_lost`). The Redis `visibility_timeout` is set from
ONLOOP_JOB_TIME_LIMIT so that it always exceeds the longest job.
"""

task_acks_late = True
task_reject_on_worker_lost = True
worker_prefetch_multiplier = 1
task_default_queue = "onloop"
task_serializer = "json"
accept_content = ["json"]
result_backend = None
task_ignore_result = True
broker_connection_retry_on_startup = True
worker_hijack_root_logger = False
worker_send_task_events = False
timezone = "UTC"
