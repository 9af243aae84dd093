#!/usr/bin/env bash
# `make browser-test`: the console, and a page on another origin calling the server
# (`--cors-origins`), in a real headless Chromium (Debian's, installed when missing), driven
# through the DevTools protocol by puppeteer-core (pinned, no browser download). Screenshots
# of each console step go to target/browser/shots/.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=target/browser
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROMIUM" ]; then
  command -v apt-get >/dev/null || { echo "browser-test: chromium is missing and apt-get is not available" >&2; exit 1; }
  echo "browser-test: installing chromium from Debian"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq chromium >/dev/null
  CHROMIUM=$(command -v chromium)
fi
PIN="puppeteer-core@23.11.1"
if [ "$(cat "$ROOT/pin.txt" 2>/dev/null)" != "$PIN" ]; then
  command -v npm >/dev/null || { echo "browser-test: npm is required" >&2; exit 1; }
  rm -rf "$ROOT"
  mkdir -p "$ROOT"
  (cd "$ROOT" && npm init -y >/dev/null && npm install --silent --no-audit --no-fund "$PIN") \
    || { echo "browser-test: cannot install $PIN" >&2; exit 1; }
  echo "$PIN" > "$ROOT/pin.txt"
fi
cp tests/browser/server.mjs tests/browser/console.mjs tests/browser/cors.mjs tests/browser/client.mjs "$ROOT/"
# The shipped client package as an application bundles it: packed, installed beside the pinned
# @ag-ui/client 1.0 and bundled for the browser with esbuild (pinned; both from npm).
APP_PIN="@ag-ui/client@1.0.0 esbuild@0.24.2"
APP=$ROOT/app
if [ "$(cat "$APP/pin.txt" 2>/dev/null)" != "$APP_PIN" ]; then
  rm -rf "$APP"
  mkdir -p "$APP"
  # shellcheck disable=SC2086
  (cd "$APP" && npm init -y >/dev/null && npm install --silent --no-audit --no-fund $APP_PIN) \
    || { echo "browser-test: cannot install $APP_PIN" >&2; exit 1; }
  echo "$APP_PIN" > "$APP/pin.txt"
fi
rm -f "$APP"/iac-agui-client-*.tgz
(cd clients/js && npm pack --silent --pack-destination "$OLDPWD/$APP" >/dev/null)
(cd "$APP" && npm install --silent --no-audit --no-fund --no-save ./iac-agui-client-*.tgz \
  && printf 'import { IacCodeAgent } from "iac-agui-client";\nwindow.IacCodeAgent = IacCodeAgent;\n' > entry.mjs \
  && ./node_modules/.bin/esbuild entry.mjs --bundle --format=esm --platform=browser --log-level=warning --outfile=client.js) \
  || { echo "browser-test: cannot bundle the client package" >&2; exit 1; }
cargo build --quiet
rm -rf "$ROOT/shots"
mkdir -p "$ROOT/shots"
# Both run whatever the other says; either failing fails the test.
status=0
node "$ROOT/console.mjs" --bin target/debug/iac-agui --chromium "$CHROMIUM" --shots "$ROOT/shots" || status=1
# A page on another origin calling the server (`--cors-origins`).
node "$ROOT/cors.mjs" --bin target/debug/iac-agui --chromium "$CHROMIUM" || status=1
# The shipped client package in a page (issue 46 item 2).
node "$ROOT/client.mjs" --bin target/debug/iac-agui --chromium "$CHROMIUM" --bundle "$APP/client.js" || status=1
exit $status
