#!/usr/bin/env bash
# The shipped JS client (clients/js) against the server: packed as `make dist` packs it
# (npm pack), installed beside the pinned @ag-ui/client 1.0 under target/interop/ts1 (the
# interop suite's install, the same pin), then clients/js/test/client.test.mjs against
# `iac-agui --demo` (no dialect flag: the package declares 1.0), and its types with tsc. Called by tests/interop/run.sh;
# `make client-test`.
#   clients/js/test/run.sh [path/to/iac-agui]   (default: cargo build, target/debug/iac-agui)
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT=target/interop
TS_V1_PIN="@ag-ui/client@1.0.0 @ag-ui/core@1.0.0"
command -v npm >/dev/null || { echo "client-test: npm is required" >&2; exit 1; }
if [ "$(cat "$ROOT/ts1/pin.txt" 2>/dev/null)" != "$TS_V1_PIN" ]; then
  rm -rf "$ROOT/ts1"
  mkdir -p "$ROOT/ts1"
  # shellcheck disable=SC2086
  (cd "$ROOT/ts1" && npm init -y >/dev/null && npm install --silent --no-audit --no-fund $TS_V1_PIN) \
    || { echo "client-test: cannot install $TS_V1_PIN" >&2; exit 1; }
  echo "$TS_V1_PIN" > "$ROOT/ts1/pin.txt"
fi
BIN=${1:-}
if [ -z "$BIN" ]; then
  cargo build --quiet
  BIN=target/debug/iac-agui
fi
case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac
# The package as published: what `npm pack` puts in the tarball, unpacked where an install
# puts it (no --save: the pinned install stays as it is).
PACK=$ROOT/client-pack
rm -rf "$PACK" "$ROOT/ts1/node_modules/iac-agui-client"
mkdir -p "$PACK" "$ROOT/ts1/node_modules/iac-agui-client"
TGZ=$(cd clients/js && npm pack --silent --pack-destination "../../$PACK" | tail -1)
tar -xzf "$PACK/$TGZ" -C "$ROOT/ts1/node_modules/iac-agui-client" --strip-components=1
# The types: tsc --strict on a user's file, against @ag-ui/client 1.0's own types (not
# skipped), the package unpacked the same way.
TSC_PIN="typescript@5.9.3 @ag-ui/client@1.0.0"
TYPES=$ROOT/client-types
if [ "$(cat "$TYPES/pin.txt" 2>/dev/null)" != "$TSC_PIN" ]; then
  rm -rf "$TYPES"
  mkdir -p "$TYPES"
  # shellcheck disable=SC2086
  (cd "$TYPES" && npm init -y >/dev/null && npm install --silent --no-audit --no-fund $TSC_PIN) \
    || { echo "client-test: cannot install $TSC_PIN" >&2; exit 1; }
  echo "$TSC_PIN" > "$TYPES/pin.txt"
fi
rm -rf "$TYPES/node_modules/iac-agui-client"
mkdir -p "$TYPES/node_modules/iac-agui-client"
tar -xzf "$PACK/$TGZ" -C "$TYPES/node_modules/iac-agui-client" --strip-components=1
cp clients/js/test/types.ts "$TYPES/types.ts"
(cd "$TYPES" && node_modules/.bin/tsc --noEmit --strict --module nodenext --moduleResolution nodenext \
  --target es2022 types.ts) || { echo "CLIENT PACKAGE FAILED [types]: tsc --strict" >&2; exit 1; }
echo "client-package types ok: tsc --strict"

cp clients/js/test/client.test.mjs "$ROOT/ts1/client.test.mjs"
node "$ROOT/ts1/client.test.mjs" "$BIN"
