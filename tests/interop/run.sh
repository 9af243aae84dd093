#!/usr/bin/env bash
# Interop suite: iac-agui against the real iac-code kernel, validated with the official AG-UI
# models. Creates (and caches) a virtual environment with the pinned kernel under target/.
# No skips: if the environment cannot be created, this fails with the reason.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=target/interop
VENV=$ROOT/venv
# iac-code 0.16.0 starts with a2a-sdk 1.0.2 to 1.2.0 only (1.2.1 and later fail at import):
# the a2a-sdk pin is required. The newest that starts, and the first that does not, are tried
# below in a venv of their own.
# prometheus_client: a real Prometheus text-format parser for the /metrics checks.
PINS="iac-code[a2a]==0.16.0 a2a-sdk[http-server,signing]==1.1.5 ag-ui-protocol==0.1.20 prometheus_client==0.21.1"
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

# The official AG-UI TypeScript client (the pipeline a web console uses), pinned, under target/.
TS_CLIENT_PIN="@ag-ui/client@0.0.59"
if [ "$(cat "$ROOT/ts/pin.txt" 2>/dev/null)" != "$TS_CLIENT_PIN" ]; then
  command -v npm >/dev/null || { echo "interop: npm is required for the AG-UI TypeScript client" >&2; exit 1; }
  rm -rf "$ROOT/ts"
  mkdir -p "$ROOT/ts"
  (cd "$ROOT/ts" && npm init -y >/dev/null && npm install --silent --no-audit --no-fund "$TS_CLIENT_PIN") \
    || { echo "interop: cannot install $TS_CLIENT_PIN" >&2; exit 1; }
  echo "$TS_CLIENT_PIN" > "$ROOT/ts/pin.txt"
fi
cp tests/interop/ts_client.mjs "$ROOT/ts/ts_client.mjs"

# AG-UI 1.0's own TypeScript client (HttpAgent) and schemas, pinned, for the 1.0-mode flows.
TS_V1_PIN="@ag-ui/client@1.0.0 @ag-ui/core@1.0.0"
if [ "$(cat "$ROOT/ts1/pin.txt" 2>/dev/null)" != "$TS_V1_PIN" ]; then
  rm -rf "$ROOT/ts1"
  mkdir -p "$ROOT/ts1"
  # shellcheck disable=SC2086
  (cd "$ROOT/ts1" && npm init -y >/dev/null && npm install --silent --no-audit --no-fund $TS_V1_PIN) \
    || { echo "interop: cannot install $TS_V1_PIN" >&2; exit 1; }
  echo "$TS_V1_PIN" > "$ROOT/ts1/pin.txt"
fi
cp tests/interop/ts_agent_v1.mjs tests/interop/ts_stop_v1.mjs tests/interop/ts_kinds_v1.mjs tests/interop/harness.mjs "$ROOT/ts1/"
export IAC_AGUI_TS_AGENT_V1="$PWD/$ROOT/ts1/ts_agent_v1.mjs"
export IAC_AGUI_TS_KINDS_V1="$PWD/$ROOT/ts1/ts_kinds_v1.mjs"
# The guide's Stop for HttpAgent, taken from docs/clients.md verbatim.
awk '/^```js file=http-agent-stop.mjs$/ {on = 1; next} on && /^```$/ {exit} on' docs/clients.md > "$ROOT/ts1/http-agent-stop.mjs"
[ -s "$ROOT/ts1/http-agent-stop.mjs" ] || { echo "interop: docs/clients.md has no http-agent-stop.mjs block" >&2; exit 1; }
export IAC_AGUI_TS_STOP_V1="$PWD/$ROOT/ts1/ts_stop_v1.mjs"
# CopilotKit 1.75's runtime and client core, pinned (its optional peers, LangChain and the
# like, are not needed: --legacy-peer-deps), with the agent block of docs/clients.md taken
# from the file verbatim, so the guide's code is what runs.
CK_PIN="@copilotkit/runtime@1.75.0 @copilotkit/core@1.75.0 @ag-ui/client@0.0.59 rxjs@7.8.1"
if [ "$(cat "$ROOT/ck/pin.txt" 2>/dev/null)" != "$CK_PIN" ]; then
  rm -rf "$ROOT/ck"
  mkdir -p "$ROOT/ck"
  # shellcheck disable=SC2086
  (cd "$ROOT/ck" && npm init -y >/dev/null && npm install --silent --no-audit --no-fund --legacy-peer-deps $CK_PIN) \
    || { echo "interop: cannot install $CK_PIN" >&2; exit 1; }
  echo "$CK_PIN" > "$ROOT/ck/pin.txt"
fi
cp tests/interop/copilotkit.mjs tests/interop/harness.mjs "$ROOT/ck/"
# The agent block imports the shipped JS client (clients/js): packed as `make dist` packs it and
# unpacked where an install puts it.
PACK=$ROOT/ck-client-pack
rm -rf "$PACK" "$ROOT/ck/node_modules/iac-agui-client"
mkdir -p "$PACK" "$ROOT/ck/node_modules/iac-agui-client"
TGZ=$(cd clients/js && npm pack --silent --pack-destination "../../$PACK" | tail -1)
tar -xzf "$PACK/$TGZ" -C "$ROOT/ck/node_modules/iac-agui-client" --strip-components=1
awk '/^```js file=iac-code-agent.mjs$/ {on = 1; next} on && /^```$/ {exit} on' docs/clients.md > "$ROOT/ck/iac-code-agent.mjs"
[ -s "$ROOT/ck/iac-code-agent.mjs" ] || { echo "interop: docs/clients.md has no iac-code-agent.mjs block" >&2; exit 1; }
export IAC_AGUI_COPILOTKIT="$PWD/$ROOT/ck/copilotkit.mjs"
# CopilotKit's runtime reports usage to its vendor unless told not to; tests talk to loopback only.
export COPILOTKIT_TELEMETRY_DISABLED=true
# The Python SDK 1.0 (already installed for the 1.0 models), to build its own RunAgentInput.
export IAC_AGUI_PY_SDK_V1="$PWD/$ROOT/agui10"

# The community conformance validator, live mode, in a venv of its own (its httpx must not
# move the kernel's).
VALIDATOR_PIN="ag-ui-validate[transport]==0.4.0"
if [ "$(cat "$ROOT/validator/pin.txt" 2>/dev/null)" != "$VALIDATOR_PIN" ]; then
  rm -rf "$ROOT/validator"
  "$PY" -m venv "$ROOT/validator" || { echo "interop: cannot create the validator's venv" >&2; exit 1; }
  "$ROOT/validator/bin/pip" install -q --disable-pip-version-check "$VALIDATOR_PIN" \
    || { echo "interop: cannot install $VALIDATOR_PIN" >&2; exit 1; }
  echo "$VALIDATOR_PIN" > "$ROOT/validator/pin.txt"
fi
export IAC_AGUI_VALIDATOR="$PWD/$ROOT/validator/bin/ag-ui-validate"
export IAC_AGUI_TS_CLIENT="$ROOT/ts/ts_client.mjs"

# The official OTLP protobuf models, to read what --otlp-endpoint exports (their own target
# directory: the kernel's venv keeps its own protobuf).
OTLP_PINS="opentelemetry-proto==1.45.2 protobuf==7.36.2"
if [ "$(cat "$ROOT/otlp/pin.txt" 2>/dev/null)" != "$OTLP_PINS" ]; then
  rm -rf "$ROOT/otlp"
  # shellcheck disable=SC2086
  "$VENV/bin/pip" install -q --disable-pip-version-check --target "$ROOT/otlp" $OTLP_PINS \
    || { echo "interop: cannot install $OTLP_PINS" >&2; exit 1; }
  echo "$OTLP_PINS" > "$ROOT/otlp/pin.txt"
fi

# The a2a-sdk versions a user gets (issue 38): the newest one iac-code 0.16.0 starts with
# (the whole managed-kernel suite runs on it) and the first one it does not (start-up only:
# iac-agui must exit non-zero with the one-line fix). One venv for both.
SDK_NEWEST="a2a-sdk[http-server,signing]==1.2.0"
SDK_BAD="a2a-sdk[http-server,signing]==1.3.0"
VENV_SDK=$ROOT/venv-sdk
if [ ! -x "$VENV_SDK/bin/iac-code" ] || [ "$(cat "$ROOT/venv-sdk.pin" 2>/dev/null)" != "$SDK_NEWEST $SDK_BAD" ]; then
  rm -rf "$VENV_SDK"
  "$PY" -m venv "$VENV_SDK" || { echo "interop: cannot create a virtual environment with $PY" >&2; exit 1; }
  "$VENV_SDK/bin/pip" install -q --disable-pip-version-check "iac-code[a2a]==0.16.0" "$SDK_NEWEST" \
    || { echo "interop: cannot install iac-code with $SDK_NEWEST" >&2; exit 1; }
  echo "$SDK_NEWEST $SDK_BAD" > "$ROOT/venv-sdk.pin"
fi

# The sidecar (the build without the default features) first, kept aside: the same cargo
# target directory then builds the default binary.
cargo build --quiet --no-default-features
SIDECAR_BIN=$ROOT/iac-agui-sidecar
cp target/debug/iac-agui "$SIDECAR_BIN"
cargo build --quiet
BIN=target/debug/iac-agui
KERNEL="$VENV/bin/iac-code"
passed=0
# The shipped JS client against --demo, no dialect flag (its own script: clients/js/test/run.sh).
echo "== the JS client package (clients/js)"
clients/js/test/run.sh "$BIN"
passed=$((passed + 1))
# Every server is started with no dialect flag; the second word is the AG-UI version the suite's
# own requests declare (1.0: `protocolVersion: "1.0"`, as the 1.0 SDKs send it; 0.1: none).
for cfg in "managed 0.1" "external 0.1" "external 1.0"; do
  set -- $cfg
  if [ "$2" = "1.0" ]; then export PYTHONPATH="$ROOT/agui10"; else unset PYTHONPATH; fi
  "$VENV/bin/python" tests/interop/run.py --bin "$BIN" --iac-code "$KERNEL" --mode "$1" --protocol "$2"
  passed=$((passed + 1))
done
unset PYTHONPATH
# The sidecar against the real kernel: the reference's scenarios, the kernel managed and not.
for mode in managed external; do
  echo "== the sidecar (--no-default-features), $mode kernel, 0.1"
  "$VENV/bin/python" tests/interop/run.py --bin "$SIDECAR_BIN" --iac-code "$KERNEL" --mode "$mode" --protocol 0.1 --sidecar
  passed=$((passed + 1))
done

echo "== OTLP export (--otlp-endpoint) read by opentelemetry-proto"
PYTHONPATH="$ROOT/otlp" "$VENV/bin/python" tests/interop/otlp_receiver.py --bin "$BIN"
passed=$((passed + 1))

echo "== the newest a2a-sdk that starts: $SDK_NEWEST"
"$VENV_SDK/bin/pip" install -q --disable-pip-version-check "$SDK_NEWEST" \
  || { echo "interop: cannot install $SDK_NEWEST" >&2; exit 1; }
"$VENV/bin/python" tests/interop/run.py --bin "$BIN" --iac-code "$VENV_SDK/bin/iac-code" --mode managed --protocol 0.1
passed=$((passed + 1))

echo "== an a2a-sdk that does not start: $SDK_BAD"
"$VENV_SDK/bin/pip" install -q --disable-pip-version-check "$SDK_BAD" \
  || { echo "interop: cannot install $SDK_BAD" >&2; exit 1; }
set +e
OUT=$(IAC_CODE_AGUI_KERNEL_CMD="$VENV_SDK/bin/iac-code" IAC_CODE_AGUI_STATE_DIR="$ROOT/sdk-bad-state" \
      timeout 120 "$BIN" --port 0 2>&1)
CODE=$?
set -e
LINE=$(printf '%s\n' "$OUT" | grep '^iac-agui: The local A2A process exited during startup' || true)
if [ "$CODE" = 0 ] || [ "$CODE" = 124 ] \
   || ! printf '%s' "$LINE" | grep -q "Likely cause: a2a-sdk 1.3.0 is installed" \
   || ! printf '%s' "$LINE" | grep -q "Fix: pip install 'a2a-sdk\[http-server,signing\]>=1.0.2,<1.2.1'"; then
  echo "INTEROP FAILED [a2a-sdk 1.3.0 start-up]: exit $CODE; the last lines:" >&2
  printf '%s\n' "$OUT" | tail -5 >&2
  exit 1
fi
echo "ok   a2a-sdk 1.3.0: iac-agui exits $CODE with the fix in one line"
passed=$((passed + 1))
"$VENV_SDK/bin/pip" install -q --disable-pip-version-check "$SDK_NEWEST" >/dev/null 2>&1 || true
echo "interop: $passed passed, 0 failed"
