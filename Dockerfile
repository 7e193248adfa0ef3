# syntax=docker/dockerfile:1
# onloop in one image: `onloop web`, `onloop worker` and `onloop beat` (the command picks).
# Health: the image has no HEALTHCHECK because the worker serves no HTTP; docker-compose.yml
# and the Helm chart probe the web's /healthz and /readyz, and ping the worker over Celery.

FROM python:3.12-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /opt/onloop
# Dependencies first: this layer is reused until pyproject.toml changes.
COPY pyproject.toml README.md ./
RUN mkdir app tasks && touch app/__init__.py tasks/__init__.py \
 && pip install . && pip uninstall -y onloop && rm -rf app tasks build
COPY app ./app
COPY tasks ./tasks
COPY config ./config
# Editable: gunicorn, Celery and the sandbox image build read config/ next to the packages.
RUN pip install --no-deps -e . && python -m compileall -q app tasks config

FROM python:3.12-slim
# git: the repository cache and pushes; bubblewrap: ONLOOP_SANDBOX_BACKEND=local.
RUN apt-get update \
 && apt-get install -y --no-install-recommends git bubblewrap ca-certificates \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --gid 10001 onloop \
 && useradd --uid 10001 --gid 10001 --home-dir /var/lib/onloop --shell /usr/sbin/nologin onloop \
 && install -d -o onloop -g onloop /var/lib/onloop /var/lib/onloop/var /var/lib/onloop/work
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/onloop /opt/onloop
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    ONLOOP_WORK_DIR=/var/lib/onloop/work
# Relative paths (var/, .env) resolve here; the sandbox workspaces live in work/. var/ holds
# the default SQLite database (var/onloop.db): a volume, so it outlives the container.
WORKDIR /var/lib/onloop
VOLUME ["/var/lib/onloop/var"]
USER 10001:10001
EXPOSE 8000
ENTRYPOINT ["onloop"]
CMD ["web", "--bind", "0.0.0.0:8000"]
