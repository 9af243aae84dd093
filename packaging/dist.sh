#!/usr/bin/env bash
# make dist: the static release binary, packed reproducibly, with its wheel, SBOM and sums.
#   dist/iac-agui-<v>-x86_64-unknown-linux-gnu.tar.gz   binary, README, operations guide,
#                                                       example config, systemd unit
#   dist/iac_agui-<v>-py3-none-<platform tags>.whl      the same binary for pip/pipx/uv
#   dist/iac-agui-<v>.cdx.json                          CycloneDX SBOM of the linked crates
#   dist/iac-agui-client-<v>.tgz                        the JS client package (clients/js), npm pack
#   dist/SHA256SUMS
# Reproducible: the same commit gives the same tarball and wheel bytes (docs/operations.md,
# "Release artifacts", says what is pinned). DIST_TARGET_DIR builds in another target
# directory (the reproducibility check builds twice from scratch).
set -euo pipefail
cd "$(dirname "$0")/.."
TRIPLE=x86_64-unknown-linux-gnu
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
NAME=iac-agui-$VERSION-$TRIPLE
OUT=${DIST_DIR:-dist}
TARGET_DIR=${DIST_TARGET_DIR:-target}
# Every date in the artifacts is the commit's date (a dirty tree: still the commit's).
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 315532800)}
# Build paths never reach the binary: the checkout, the cargo home and the target directory
# are remapped to fixed names (panic locations and std paths are then the same anywhere).
CARGO_HOME_DIR=${CARGO_HOME:-$HOME/.cargo}
# --icf=all: identical functions folded by the linker (rust-lld, x86_64-unknown-linux-gnu's
# linker since Rust 1.90): ~40 KB (docs/performance.md, "Binary size").
export RUSTFLAGS="-C target-feature=+crt-static -C link-arg=-Wl,--icf=all --remap-path-prefix=$PWD=/iac-agui --remap-path-prefix=$CARGO_HOME_DIR=/cargo"
export CARGO_TARGET_DIR=$TARGET_DIR
# DIST_SIDECAR=1 (with DIST_ONLY_BUILD and its own DIST_TARGET_DIR): the same build without the
# extras, `--no-default-features` (make dist-check measures it; it is not released).
FEATURES=()
if [ -n "${DIST_SIDECAR:-}" ]; then FEATURES=(--no-default-features); fi
cargo build --release --locked --target $TRIPLE "${FEATURES[@]}"
BIN=$TARGET_DIR/$TRIPLE/release/iac-agui
if [ -n "${DIST_ONLY_BUILD:-}" ]; then ls -l "$BIN"; exit 0; fi
[ -z "${DIST_SIDECAR:-}" ] || { echo "dist: DIST_SIDECAR builds only (DIST_ONLY_BUILD=1)" >&2; exit 1; }

rm -rf "$OUT"
STAGE=$OUT/.stage/$NAME
mkdir -p "$STAGE"
install -m 0755 "$BIN" "$STAGE/iac-agui"
install -m 0644 README.md "$STAGE/README.md"
install -m 0644 docs/operations.md "$STAGE/operations.md"
install -m 0644 packaging/iac-agui.example.yaml "$STAGE/iac-agui.example.yaml"
install -m 0644 packaging/iac-agui.service "$STAGE/iac-agui.service"
# GNU tar with every varying field fixed: name order, owner, mtimes, no pax atime/ctime;
# gzip without the name and time of its input.
tar --sort=name --format=gnu --owner=0 --group=0 --numeric-owner \
    --mtime="@$SOURCE_DATE_EPOCH" --mode='u+rw,go+r,go-w' \
    -C "$OUT/.stage" -cf - "$NAME" | gzip -9 -n > "$OUT/$NAME.tar.gz"
rm -rf "$OUT/.stage"

# Platform tags: a static binary needs no particular libc (auditwheel's check in
# tests/dist/run.sh confirms it has no versioned symbol and no shared library).
python3 packaging/wheel.py --bin "$BIN" --out "$OUT" \
  --tag manylinux_2_5_x86_64 --tag manylinux1_x86_64 --tag musllinux_1_1_x86_64 >/dev/null

# The JS client package, as npm packs it (npm fixes every mtime and mode in the tarball):
# its version is the crate's.
PKG_VERSION=$(sed -n 's/^  "version": "\(.*\)",$/\1/p' clients/js/package.json)
[ "$PKG_VERSION" = "$VERSION" ] \
  || { echo "dist: clients/js/package.json says version $PKG_VERSION, the crate $VERSION" >&2; exit 1; }
command -v npm >/dev/null || { echo "dist: npm is required to pack the JS client (clients/js)" >&2; exit 1; }
ABS_OUT=$(cd "$OUT" && pwd)
(cd clients/js && npm pack --silent --pack-destination "$ABS_OUT" >/dev/null)
[ -f "$OUT/iac-agui-client-$VERSION.tgz" ] || { echo "dist: npm pack wrote no iac-agui-client-$VERSION.tgz" >&2; exit 1; }

# The SBOM of exactly what the release build links: normal dependencies of the default
# features for this target (no dev or build dependencies).
# Installed as a host tool: not with the release's static flags (a static host cannot build
# its proc-macros) nor into the release's target directory.
command -v cargo-cyclonedx >/dev/null ||
  env -u RUSTFLAGS -u CARGO_TARGET_DIR cargo install cargo-cyclonedx --locked --version 0.5.9
python3 packaging/sbom.py --out "$OUT/iac-agui-$VERSION.cdx.json" --target $TRIPLE

(cd "$OUT" && sha256sum -- *.tar.gz *.whl *.tgz *.cdx.json > SHA256SUMS)
ls -l "$OUT"
