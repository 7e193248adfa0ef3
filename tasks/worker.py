"""`onloop worker`: the Celery worker with the outbox dispatcher running beside it."""

from __future__ import annotations

import socket
from datetime import timedelta

from app.settings import Settings
from tasks.celery_app import QUEUE, create_celery
from tasks.dispatch import Dispatcher
from tasks.jobs import database
from tasks.workplace import close_workplaces, reap_sandboxes


def run_worker(settings: Settings, concurrency: int = 4, beat: bool = False) -> None:
    """Run until stopped. Threads, not forks: jobs wait on sandboxes and GitHub, not CPU."""
    celery = create_celery(settings)
    db = database(settings)
    dispatcher = Dispatcher(
        db,
        celery,
        interval=settings.dispatch_interval,
        authorization_wait=timedelta(seconds=settings.authorization_wait),
        housekeeping=lambda: reap_sandboxes(settings, db),
        housekeeping_interval=settings.reap_interval,
        settings=settings,
    )
    dispatcher.start()
    argv = [
        "worker",
        f"--hostname=onloop@{socket.gethostname()}",
        "--pool=threads",
        f"--concurrency={concurrency}",
        f"--queues={QUEUE}",
        f"--loglevel={settings.log_level}",
        "--without-gossip",
        "--without-mingle",
    ]
    if beat:
        argv += ["--beat", "--schedule=var/celerybeat-schedule"]
    try:
        celery.worker_main(argv)
    finally:
        dispatcher.stop()
        close_workplaces()
