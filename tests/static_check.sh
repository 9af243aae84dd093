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
trap 'kill $PID 2>/dev/null || true; rm -rf "$ROOT"' EXIT
cp "$BIN" "$ROOT/iac-agui"
mkdir -p "$ROOT/ws"
chroot "$ROOT" /iac-agui --version
chroot "$ROOT" /iac-agui --demo --port 0 --state-dir /state 2> "$ROOT.log" &
PID=$!
for _ in $(seq 100); do grep -q "listening on" "$ROOT.log" 2>/dev/null && break; sleep 0.1; done
ADDR=$(sed -n 's/.*listening on http:\/\///p' "$ROOT.log")
[ -n "$ADDR" ] || { echo "static: no ready line" >&2; cat "$ROOT.log" >&2; exit 1; }
BODY='{"threadId":"s","runId":"r","state":{},"tools":[],"context":[],"messages":[{"id":"m","role":"user","content":"hello"}],"forwardedProps":{"iacCode":{"schemaVersion":1,"rosInvocationId":"x","cwd":"/ws"}}}'
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
kill -TERM $PID; wait $PID
echo "static: ok ($SIZE bytes, static, runs in an empty root)"
