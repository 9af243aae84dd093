#!/usr/bin/env bash
# Interop suite: iac-agui against the real iac-code kernel, validated with the official AG-UI
# models. Creates (and caches) a virtual environment with the pinned kernel under target/.
# No skips: if the environment cannot be created, this fails with the reason.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=target/interop
VENV=$ROOT/venv
# iac-code 0.16.0 does not start with a2a-sdk 1.2/1.3: the a2a-sdk pin is required.
PINS="iac-code[a2a]==0.16.0 a2a-sdk[http-server,signing]==1.1.5 ag-ui-protocol==0.1.20"
PINS_V1="ag-ui-protocol==1.0.0"
PY=${PYTHON:-python3}

if [ ! -x "$VENV/bin/iac-code" ] || [ "$(cat "$ROOT/pins.txt" 2>/dev/null)" != "$PINS $PINS_V1" ]; then
  rm -rf "$ROOT"
  mkdir -p "$ROOT"
  "$PY" -m venv "$VENV" || { echo "interop: cannot create a Python virtual environment with $PY" >&2; exit 1; }
  # shellcheck disable=SC2086
  "$VENV/bin/pip" install -q --disable-pip-version-check $PINS \
    || { echo "interop: cannot install the pinned kernel ($PINS)" >&2; exit 1; }
  "$VENV/bin/pip" install -q --disable-pip-version-check --target "$ROOT/agui10" $PINS_V1 \
    || { echo "interop: cannot install the AG-UI 1.0 models ($PINS_V1)" >&2; exit 1; }
  echo "$PINS $PINS_V1" > "$ROOT/pins.txt"
fi

cargo build --quiet
BIN=target/debug/iac-agui
KERNEL="$VENV/bin/iac-code"
passed=0
for cfg in "managed 0.1" "external 0.1" "external 1.0"; do
  set -- $cfg
  if [ "$2" = "1.0" ]; then export PYTHONPATH="$ROOT/agui10"; else unset PYTHONPATH; fi
  "$VENV/bin/python" tests/interop/run.py --bin "$BIN" --iac-code "$KERNEL" --mode "$1" --protocol "$2"
  passed=$((passed + 1))
done
echo "interop: $passed passed, 0 failed"
