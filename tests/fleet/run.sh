#!/usr/bin/env bash
# `make fleet`: two iac-agui --demo pairs behind a stock nginx with thread affinity, then the
# identity-header recipe of docs/operations.md run as written (recipe.py), on loopback ports.
# Installs nginx from Debian when it is missing. Stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
  command -v apt-get >/dev/null || { echo "fleet: nginx is missing and apt-get is not available" >&2; exit 1; }
  echo "fleet: installing nginx from Debian"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq nginx-light >/dev/null 2>&1 || apt-get install -y -qq nginx >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
cargo build --quiet
python3 tests/fleet/fleet.py --bin target/debug/iac-agui --nginx "$NGINX"
exec python3 tests/fleet/recipe.py --bin target/debug/iac-agui --nginx "$NGINX"
