#!/usr/bin/env bash
# make dist-check: the release artifacts are what docs/operations.md says they are.
#  1. make dist; SHA256SUMS verifies; the binary is static, <= 5 MiB, and says its version. The
#     sidecar (the same build with --no-default-features) is static, <= 4.5 MiB, and printed.
#  2. Reproducible: a second `make dist` from a copy of the tree in another directory, with
#     another target directory and a cold build, gives the same tarball and wheel bytes.
#  3. The tarball holds exactly the binary, README, operations guide, example config, unit;
#     the JS client package holds its package.json (the crate's version, the peer only), the
#     module, its types and its README.
#  4. The SBOM lists every crate the release build links (cargo tree), at its locked version.
#  5. The wheel passes auditwheel's check (pinned from PyPI); the README's install lines (the
#     wheel with its [kernel] extra, in a fresh venv) give iac-code 0.16.0 with an a2a-sdk that
#     starts: --version, then a managed kernel found beside the binary, a plain run and a
#     permission resume with JSON logs, and no kernel left behind.
#  6. systemd-analyze verify accepts the unit (systemd is installed from Debian when missing).
#  7. The container image's root, assembled from the Dockerfile, serves a demo run (image_check.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
TRIPLE=x86_64-unknown-linux-gnu
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
NAME=iac-agui-$VERSION-$TRIPLE
WORK=target/dist-check
# docs/performance.md, "Binary size": the default build 4.79 MiB, the sidecar 4.5 (issue 58).
# The bounds catch a new dependency, a large table or a generic instantiated per type.
MAX_SIZE=$((5 * 1024 * 1024))
MAX_SIDECAR=$((9 * 512 * 1024))
mib() { python3 -c "import sys; print(f'{int(sys.argv[1]) / 1048576:.2f} MiB')" "$1"; }
fail() { echo "dist-check FAILED: $*" >&2; exit 1; }
export SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)
rm -rf "$WORK"; mkdir -p "$WORK"

echo "== 1. make dist"
bash packaging/dist.sh >/dev/null
(cd dist && sha256sum -c --quiet SHA256SUMS) || fail "SHA256SUMS does not verify"
tar -xzf "dist/$NAME.tar.gz" -C "$WORK"
BIN=$WORK/$NAME/iac-agui
file "$BIN" | grep -Eq "statically linked|static-pie linked" || fail "not static: $(file "$BIN")"
SIZE=$(stat -c %s "$BIN")
[ "$SIZE" -le "$MAX_SIZE" ] || fail "the static binary is $SIZE bytes ($(mib "$SIZE")), over 5 MiB"
[ "$("$BIN" --version)" = "iac-agui $VERSION" ] || fail "--version says $("$BIN" --version)"
echo "static binary: $SIZE bytes ($(mib "$SIZE"); bound 5 MiB)"
DIST_ONLY_BUILD=1 DIST_SIDECAR=1 DIST_TARGET_DIR=target/sidecar bash packaging/dist.sh >/dev/null
SIDECAR=target/sidecar/$TRIPLE/release/iac-agui
file "$SIDECAR" | grep -Eq "statically linked|static-pie linked" || fail "the sidecar is not static: $(file "$SIDECAR")"
SIDECAR_SIZE=$(stat -c %s "$SIDECAR")
[ "$SIDECAR_SIZE" -le "$MAX_SIDECAR" ] \
  || fail "the sidecar static binary is $SIDECAR_SIZE bytes ($(mib "$SIDECAR_SIZE")), over 4.5 MiB"
echo "sidecar static binary (--no-default-features): $SIDECAR_SIZE bytes ($(mib "$SIDECAR_SIZE"); bound 4.5 MiB)"

echo "== 2. reproducible"
COPY=$WORK/copy
mkdir -p "$COPY"
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -C "$COPY" -xf -
(cd "$COPY" && DIST_TARGET_DIR="$PWD/target" bash packaging/dist.sh >/dev/null)
for f in "$NAME.tar.gz" "iac_agui-$VERSION-"*.whl "iac-agui-$VERSION.cdx.json" "iac-agui-client-$VERSION.tgz"; do
  for g in dist/$f; do
    cmp "$g" "$COPY/$g" || fail "$g differs between two builds"
  done
done
rm -rf "$COPY"
echo "two builds, same bytes: $(cd dist && sha256sum "$NAME.tar.gz" | cut -c1-16)…"

echo "== 3. tarball contents"
LIST=$(tar -tzvf "dist/$NAME.tar.gz" | awk '{print $1, $2, $6}')
WANT="drwxr-xr-x 0/0 $NAME/
-rw-r--r-- 0/0 $NAME/README.md
-rwxr-xr-x 0/0 $NAME/iac-agui
-rw-r--r-- 0/0 $NAME/iac-agui.example.yaml
-rw-r--r-- 0/0 $NAME/iac-agui.service
-rw-r--r-- 0/0 $NAME/operations.md"
[ "$LIST" = "$WANT" ] || fail "tarball contents: $LIST"
# The example configuration is one the binary accepts without a warning.
OUT=$("$BIN" --config "$WORK/$NAME/iac-agui.example.yaml" --demo --port 0 --state-dir "$WORK/state" \
      --idle-shutdown 1 2>&1) || fail "the example config does not start: $OUT"
! echo "$OUT" | grep -qi "warn" || fail "the example config warns: $OUT"

# The JS client package: exactly its files, and a package.json that installs as documented.
CLIENT=dist/iac-agui-client-$VERSION.tgz
[ -f "$CLIENT" ] || fail "no $CLIENT"
LIST=$(tar -tzf "$CLIENT" | sort | tr '\n' ' ')
[ "$LIST" = "package/README.md package/index.d.ts package/index.js package/package.json " ] \
  || fail "client package contents: $LIST"
tar -xzf "$CLIENT" -C "$WORK"
python3 - "$WORK/package/package.json" "$VERSION" <<'PY' || fail "the client package's package.json"
import json, sys
p = json.load(open(sys.argv[1]))
want = {"name": "iac-agui-client", "version": sys.argv[2], "type": "module", "types": "./index.d.ts",
        "peerDependencies": {"@ag-ui/client": "^1.0.0"}}
bad = {k: p.get(k) for k, v in want.items() if p.get(k) != v}
if bad or p.get("dependencies"):
    sys.exit(f"package.json: {bad or p.get('dependencies')}")
PY
grep -q "export class IacCodeAgent" "$WORK/package/index.js" || fail "the client module exports no IacCodeAgent"
grep -q "export declare class IacCodeAgent" "$WORK/package/index.d.ts" || fail "the client types declare no IacCodeAgent"
echo "client package: $(tar -tzf "$CLIENT" | wc -l) files, version $VERSION"

echo "== 4. SBOM"
python3 - "dist/iac-agui-$VERSION.cdx.json" "$TRIPLE" <<'PY' || fail "SBOM"
import json, subprocess, sys
bom = json.load(open(sys.argv[1]))
listed = {(c["name"], c["version"]) for c in bom["components"]}
tree = subprocess.run(["cargo", "tree", "-e", "normal", "--target", sys.argv[2], "--prefix", "none",
                       "--format", "{p}", "--locked"], check=True, capture_output=True, text=True).stdout
linked = {(l.split()[0], l.split()[1][1:]) for l in tree.splitlines() if l.strip()} - {("iac-agui", bom["metadata"]["component"]["version"])}
missing = linked - listed
extra = listed - linked
if missing or extra:
    sys.exit(f"missing {sorted(missing)}, not linked {sorted(extra)}")
lock = open("Cargo.lock").read()
for name, version in listed:
    if f'name = "{name}"\nversion = "{version}"' not in lock:
        sys.exit(f"{name} {version} is not in Cargo.lock")
print(f"sbom: {len(listed)} crates, every linked one")
PY

echo "== 5. wheel"
TOOLS=$WORK/../dist-tools
AUDITWHEEL_PIN="auditwheel==6.4.2 ag-ui-protocol==0.1.20"
if [ "$(cat "$TOOLS/pin.txt" 2>/dev/null)" != "$AUDITWHEEL_PIN" ]; then
  rm -rf "$TOOLS"; python3 -m venv "$TOOLS"
  # shellcheck disable=SC2086
  "$TOOLS/bin/pip" install -q --disable-pip-version-check $AUDITWHEEL_PIN || fail "cannot install $AUDITWHEEL_PIN"
  echo "$AUDITWHEEL_PIN" > "$TOOLS/pin.txt"
fi
WHEEL=$(ls dist/iac_agui-"$VERSION"-*.whl)
SHOW=$("$TOOLS/bin/auditwheel" show "$WHEEL" 2>&1)
echo "$SHOW" | grep -q 'consistent with the following platform tag: "manylinux_2_5_x86_64"' \
  || fail "auditwheel: $SHOW"
echo "$SHOW" | grep -q "requires no external shared libraries" || fail "auditwheel: $SHOW"
case "$WHEEL" in *manylinux_2_5_x86_64*) ;; *) fail "the wheel is not tagged manylinux_2_5: $WHEEL" ;; esac
# The README's install lines, verbatim (its `install.sh` block, all but the line that serves for
# ever), in a fresh directory holding the wheel: the [kernel] extra alone must bring a kernel
# that starts (no iac-code or a2a-sdk pinned here).
INSTALL=$WORK/install
mkdir -p "$INSTALL"
cp "$WHEEL" "$INSTALL/"
awk '/^```sh file=install.sh$/ {on = 1; next} on && /^```$/ {exit} on' README.md | sed '$d' > "$INSTALL/install.sh"
[ "$(wc -l < "$INSTALL/install.sh")" -ge 2 ] || fail "README.md has no install.sh block"
(cd "$INSTALL" && PIP_DISABLE_PIP_VERSION_CHECK=1 bash -e install.sh >/dev/null) || fail "the README's install lines"
VENV=$INSTALL/iac-agui-env
[ "$("$VENV/bin/iac-agui" --version)" = "iac-agui $VERSION" ] || fail "the installed iac-agui"
cmp "$VENV/bin/iac-agui" "$BIN" || fail "pip installed another binary than the tarball's"
SDK=$("$VENV/bin/python" -c "import importlib.metadata as m; print(m.version('a2a-sdk'))")
case "$SDK" in 1.0.*|1.1.*|1.2.0) ;; *) fail "the [kernel] extra brought a2a-sdk $SDK" ;; esac
echo "the [kernel] extra: iac-code $("$VENV/bin/python" -c "import importlib.metadata as m; print(m.version('iac-code'))"), a2a-sdk $SDK"
# Not on PATH, no IAC_CODE_AGUI_KERNEL_CMD, no --demo: iac-agui must find the venv's iac-code
# itself and the managed kernel must start (/health 200) and serve runs.
env -u IAC_CODE_AGUI_KERNEL_CMD PATH=/usr/bin:/bin "$TOOLS/bin/python" tests/interop/run.py \
  --bin "$VENV/bin/iac-agui" --iac-code "$VENV/bin/iac-code" --mode managed --kernel-beside-bin \
  --only scenario_plain,scenario_permission --log-format json --check-json-log \
  || fail "the installed wheel with its managed kernel"
if pgrep -f "$VENV/bin/iac-code a2a" >/dev/null; then fail "a kernel outlived iac-agui"; fi

echo "== 6. systemd unit"
command -v systemd-analyze >/dev/null || { apt-get update -qq && apt-get install -y -qq systemd >/dev/null; }
sed "s#^ExecStart=/usr/local/bin/iac-agui#ExecStart=$PWD/$BIN#" packaging/iac-agui.service > "$WORK/iac-agui.service"
systemd-analyze verify "$WORK/iac-agui.service" || fail "systemd-analyze verify"
grep -q '^TimeoutStopSec=45$' packaging/iac-agui.service || fail "TimeoutStopSec must cover the 30 s drain + 5 s kernel stop"

echo "== 7. container image"
python3 tests/dist/image_check.py dist || fail "the container image"
echo "dist-check: 7 passed, 0 failed"
