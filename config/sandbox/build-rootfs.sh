#!/usr/bin/env bash
# Build the onloop sandbox rootfs as a tar on stdout with mmdebstrap: no container registry needed.
# Usage: build-rootfs.sh WHEEL_DIR > rootfs.tar  (WHEEL_DIR holds the wheels named in tools.txt)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
wheels="$(cd "${1:?usage: build-rootfs.sh WHEEL_DIR}" && pwd)"
suite="${ONLOOP_ROOTFS_SUITE:-bookworm}"
mirror="${ONLOOP_ROOTFS_MIRROR:-http://deb.debian.org/debian}"
security="${ONLOOP_ROOTFS_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
packages="$(grep -v '^#' "$here/packages.txt" | paste -sd, -)"

exec mmdebstrap --mode=root --variant=apt --format=tar --quiet \
  --include="$packages" \
  --aptopt='Acquire::Languages "none"' \
  --aptopt='APT::Install-Recommends "false"' \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --hook-dir=/usr/share/mmdebstrap/hooks/eatmydata \
  --customize-hook="mkdir -p \"\$1/tmp/onloop-wheels\"" \
  --customize-hook="sync-in $wheels /tmp/onloop-wheels" \
  --customize-hook="copy-in $here/tools.txt /tmp/onloop-wheels" \
  --customize-hook='chroot "$1" env -i PATH=/usr/bin:/bin python3 -m venv /opt/tools' \
  --customize-hook='chroot "$1" env -i PATH=/usr/bin:/bin /opt/tools/bin/pip install --quiet --no-index --no-cache-dir --find-links /tmp/onloop-wheels -r /tmp/onloop-wheels/tools.txt' \
  --customize-hook='rm -rf "$1/tmp/onloop-wheels" "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
  --customize-hook='chroot "$1" useradd --uid 1000 --user-group --create-home --shell /bin/bash sandbox' \
  --customize-hook='chroot "$1" useradd --uid 1001 --user-group --no-create-home --shell /usr/sbin/nologin sandbox-setup' \
  --customize-hook='mkdir -p "$1/workspace" && chown 1000:1000 "$1/workspace"' \
  --customize-hook='chroot "$1" env -i PATH=/usr/bin:/bin python3 -m venv --system-site-packages /opt/venv' \
  --customize-hook='chown -R 1001:1001 "$1/opt/venv"' \
  "$suite" - \
  "deb $mirror $suite main" \
  "deb $mirror $suite-updates main" \
  "deb $security $suite-security main"
