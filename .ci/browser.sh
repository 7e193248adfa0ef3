#!/usr/bin/env bash
# The browser tests' needs, idempotently: headless Chromium and its driver from Debian's
# packages (Selenium is pointed at them; it never downloads a browser or a driver).
set -euo pipefail
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
if ((${#missing[@]})); then
  echo "browser: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "browser: $(chromium --version 2>/dev/null); $(chromedriver --version | cut -d' ' -f1-2)"
