"""gunicorn settings for `onloop web`; the bind address comes from `--bind`."""

from gunicorn.glogging import Logger

from app.cli.webworker import ReadDeadlineWorker
from app.core.settings import load_settings

# The same settings as onloop's own (environment, then .env), so the chart's and .env's agree.
_settings = load_settings()

# Threads keep the webhook handler responsive while one request waits on the database; each
# request must arrive whole within ONLOOP_WEB_READ_TIMEOUT, or its thread drops it.
worker_class = ReadDeadlineWorker.bounded(_settings.web_read_timeout)
workers = _settings.web_workers
threads = _settings.web_threads
timeout = 30
graceful_timeout = 20
keepalive = 5
accesslog = "-" if _settings.access_log else None
# Never log query strings: OAuth callbacks carry a one-time code there.
access_log_format = '%(h)s "%(m)s %(U)s" %(s)s %(b)s %(D)sus'
errorlog = "-"
# No control socket: gunicorn's default (~/.gunicorn/gunicorn.ctl) is one path for every
# instance under the same user, and onloop does not use the control interface.
control_socket_disable = True
loglevel = _settings.log_level.lower()


class _ThroughRoot(Logger):
    """gunicorn's error and access lines go to the root logger's one handler, in onloop's
    format (app.core.logs), instead of to gunicorn's own handlers and formats."""

    def setup(self, cfg: object) -> None:
        super().setup(cfg)
        for log in (self.error_log, self.access_log):
            for handler in [h for h in log.handlers if getattr(h, "_gunicorn", False)]:
                log.removeHandler(handler)
            log.propagate = True


logger_class = _ThroughRoot
