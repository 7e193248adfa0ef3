"""gunicorn settings for `onloop web`; the bind address comes from `--bind`."""

from app.core.settings import load_settings

# The same settings as onloop's own (environment, then .env), so the chart's and .env's agree.
_settings = load_settings()

# Threads keep the webhook handler responsive while one request waits on the database.
worker_class = "gthread"
workers = _settings.web_workers
threads = _settings.web_threads
timeout = 30
graceful_timeout = 20
keepalive = 5
accesslog = "-" if _settings.access_log else None
# Never log query strings: OAuth callbacks carry a one-time code there.
access_log_format = '%(h)s "%(m)s %(U)s" %(s)s %(b)s %(D)sus'
errorlog = "-"
