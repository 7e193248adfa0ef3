#!/usr/bin/env bash
# Make the sandbox tests' needs real, idempotently: docker.io, bubblewrap and mmdebstrap from
# apt, a running dockerd, and the default sandbox image (built once, reused while its content
# hash is unchanged). Works as root on a fresh Debian 12 machine with no container registry.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PYTHON:-python3}"
DOCKERD_LOG="${ONLOOP_DOCKERD_LOG:-/var/log/onloop-dockerd.log}"
started=$(date +%s)
say() { echo "sandbox-setup: $*"; }

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v docker >/dev/null || missing+=(docker.io)
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
command -v setpriv >/dev/null || missing+=(util-linux)
if ((${#missing[@]})); then
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends ca-certificates "${missing[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  say "starting dockerd (log: $DOCKERD_LOG)"
  setsid dockerd >"$DOCKERD_LOG" 2>&1 </dev/null &
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  if ! docker info >/dev/null 2>&1; then
    say "dockerd did not come up within 60 s; its log:"
    tail -n 50 "$DOCKERD_LOG" >&2 || true
    exit 1
  fi
fi

if ! "$PY" -c 'import docker, click' 2>/dev/null; then
  say "installing the Docker SDK and click for $PY"
  "$PY" -m pip install --quiet 'docker>=7.1' 'click>=8.1'
fi
"$PY" -m app.cli.sandbox build-image
say "done in $(($(date +%s) - started)) s"
