#!/usr/bin/env bash
# Installs the system packages Sluice's tests use, when they are missing.
# Debian/Ubuntu only; needs root (CI runs as root). Safe to run repeatedly.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v git >/dev/null 2>&1 || need+=(git)             # test/deploy: release builds of fresh clones
command -v openssl >/dev/null 2>&1 || need+=(openssl) # cmd/sluice: the TLS steps of docs/operations.md
command -v caddy >/dev/null 2>&1 || need+=(caddy)   # test/e2e: forward_auth in front of sluice
# test/e2e: auth_request in front of sluice (Debian installs it in /usr/sbin)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx)
# internal/service/server: the status page in a real headless browser (chromedp)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core) # text for its screenshots

if [ ${#need[@]} -gt 0 ]; then
  echo "deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
