#!/usr/bin/env bash
# Make sure PostgreSQL answers on 127.0.0.1: install Debian's `postgresql` when it is missing,
# create the cluster when there is none, start it when it is stopped. A cluster this script
# creates trusts local TCP connections, as the tests connect as `postgres` without a password.
# ONLOOP_CI_PG_VERSION, ONLOOP_CI_PG_CLUSTER and ONLOOP_CI_PG_PORT pick another cluster (the
# script's own test uses a throwaway one).
set -euo pipefail
port="${ONLOOP_CI_PG_PORT:-5432}"
cluster="${ONLOOP_CI_PG_CLUSTER:-main}"
ready() { pg_isready -q -h 127.0.0.1 -p "$port"; }

if command -v pg_isready >/dev/null && ready; then
  exit 0
fi
fresh=""
if ! command -v pg_ctlcluster >/dev/null || [ -z "$(ls /etc/postgresql 2>/dev/null)" ]; then
  echo "postgres.sh: installing Debian's postgresql"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql
  fresh=1
fi
version="${ONLOOP_CI_PG_VERSION:-$(ls /etc/postgresql | sort -V | tail -1)}"
if [ ! -d "/etc/postgresql/$version/$cluster" ]; then
  echo "postgres.sh: creating cluster $version/$cluster on port $port"
  pg_createcluster "$version" "$cluster" -p "$port" >/dev/null
  fresh=1
fi
hba="/etc/postgresql/$version/$cluster/pg_hba.conf"
if [ -n "$fresh" ] && ! grep -q '^host all all 127.0.0.1/32 trust' "$hba"; then
  rules="$(printf 'host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n'; cat "$hba")"
  printf '%s\n' "$rules" >"$hba"  # in place: the file stays the postgres user's
  # a cluster the package install started must read the new rules
  pg_ctlcluster --skip-systemctl-redirect "$version" "$cluster" reload 2>/dev/null || true
fi
if ! ready; then
  echo "postgres.sh: starting cluster $version/$cluster"
  pg_ctlcluster --skip-systemctl-redirect "$version" "$cluster" start || true
fi
for _ in $(seq 1 30); do
  ready && exit 0
  sleep 1
done
echo "postgres.sh: PostgreSQL $version/$cluster is not answering on 127.0.0.1:$port" >&2
exit 1
