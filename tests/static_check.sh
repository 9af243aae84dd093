#!/usr/bin/env bash
# Builds the static binary and checks it: static per ldd/file, and a complete demo run inside
# an empty root (no /dev, /proc or /etc: randomness must come from the getrandom system call).
set -euo pipefail
cd "$(dirname "$0")/.."
make static >/dev/null
BIN=target/x86_64-unknown-linux-gnu/release/iac-agui
if ldd "$BIN" 2>&1 | grep -qv "not a dynamic executable\|statically linked"; then
  echo "static: ldd finds dynamic dependencies:" >&2; ldd "$BIN" >&2; exit 1
fi
if command -v file >/dev/null; then
  file "$BIN" | grep -Eq "statically linked|static-pie linked" || { echo "static: file says: $(file "$BIN")" >&2; exit 1; }
fi
SIZE=$(stat -c %s "$BIN")
ROOT=$(mktemp -d)
trap 'kill ${PID:-} 2>/dev/null || true; rm -rf "$ROOT"' EXIT
cp "$BIN" "$ROOT/iac-agui"
# The same layout, user and environment as the Dockerfile's final stage.
mkdir -p "$ROOT/workspace" "$ROOT/state"
chmod 755 "$ROOT"
chown 10001:10001 "$ROOT/workspace" "$ROOT/state"
IMAGE_ENV=(IAC_CODE_AGUI_HOST=127.0.0.1 IAC_CODE_AGUI_PORT=0 IAC_CODE_AGUI_ALLOWED_CWDS=/workspace
           IAC_CODE_AGUI_STATE_DIR=/state HOME=/state)
CHROOT=$(command -v chroot)
in_image() { env -i "${IMAGE_ENV[@]}" "$CHROOT" --userspec=10001:10001 "$ROOT" "$@"; }
in_image /iac-agui --version
env -i "${IMAGE_ENV[@]}" "$CHROOT" --userspec=10001:10001 "$ROOT" /iac-agui --demo 2> "$ROOT.log" &
PID=$!
for _ in $(seq 100); do grep -q "listening on" "$ROOT.log" 2>/dev/null && break; sleep 0.1; done
ADDR=$(sed -n 's/.*listening on http:\/\///p' "$ROOT.log")
[ -n "$ADDR" ] || { echo "static: no ready line" >&2; cat "$ROOT.log" >&2; exit 1; }
in_image /iac-agui healthcheck "http://$ADDR/health" || { echo "static: healthcheck failed" >&2; exit 1; }
BODY='{"threadId":"s","runId":"r","state":{},"tools":[],"context":[],"messages":[{"id":"m","role":"user","content":"hello"}],"forwardedProps":{"iacCode":{"schemaVersion":1,"rosInvocationId":"x","cwd":"/workspace/s"}}}'
OUT=$(python3 - "$ADDR" "$BODY" <<'PY'
import http.client, sys
host, port = sys.argv[1].rsplit(":", 1)
c = http.client.HTTPConnection(host, int(port), timeout=10)
c.request("POST", "/", body=sys.argv[2], headers={"Content-Type": "application/json"})
print(c.getresponse().read().decode())
PY
)
echo "$OUT" | grep -q '"outcome":{"type":"success"}' || { echo "static: the demo run failed: $OUT" >&2; cat "$ROOT.log" >&2; exit 1; }
[ -f "$ROOT/state/threads/s.json" ] || { echo "static: no state file in the empty root" >&2; exit 1; }
[ "$(stat -c %u "$ROOT/state/threads/s.json")" = 10001 ] || { echo "static: the state file is not the image user's" >&2; exit 1; }
kill -TERM $PID; wait $PID
if in_image /iac-agui healthcheck "http://$ADDR/health" 2>/dev/null; then
  echo "static: healthcheck succeeded with the server stopped" >&2; exit 1
fi
echo "static: ok ($SIZE bytes, static, runs in an empty root)"
