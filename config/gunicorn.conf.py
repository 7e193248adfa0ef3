"""gunicorn settings for `onloop web`; the bind address comes from `--bind`."""

import os

# Threads keep the webhook handler responsive while one request waits on the database.
worker_class = "gthread"
workers = int(os.environ.get("ONLOOP_WEB_WORKERS", "2"))
threads = int(os.environ.get("ONLOOP_WEB_THREADS", "8"))
timeout = 30
graceful_timeout = 20
keepalive = 5
accesslog = "-" if os.environ.get("ONLOOP_ACCESS_LOG", "1") == "1" else None
# Never log query strings: OAuth callbacks carry a one-time code there.
access_log_format = '%(h)s "%(m)s %(U)s" %(s)s %(b)s %(D)sus'
errorlog = "-"
