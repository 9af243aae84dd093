# iac-agui — common tasks. `make test` is what CI runs.
CARGO ?= cargo

.PHONY: all build release run test test-fast interop client-test lint fmt fuzz fuzz-smoke fuzz-build bench census stack-probe load fleet browser-test static static-check dist dist-check clean

all: build

build:
	$(CARGO) build

release:
	$(CARGO) build --release

run:
	$(CARGO) run --release --

# Everything CI checks: formatting, lints, every Rust test, and the interop suite against the
# real iac-code kernel (tests/interop/run.sh; needs python3 and the PyPI registry once).
test: lint
	$(MAKE) test-fast
	tests/interop/run.sh

# Only the hermetic Rust tests, in both builds: the default features, and none (the sidecar).
test-fast:
	$(CARGO) test --all-targets
	$(CARGO) test --no-default-features

interop:
	tests/interop/run.sh

# The shipped JS client (clients/js) against the demo (no dialect flag), with @ag-ui/client 1.0
# from npm (also part of `make interop`).
client-test:
	clients/js/test/run.sh

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings
	$(CARGO) clippy --all-targets --no-default-features -- -D warnings

fmt:
	$(CARGO) fmt --all

# Fuzzing (cargo-fuzz + libFuzzer on the stable toolchain via RUSTC_BOOTSTRAP=1; see
# docs/reliability.md). `make fuzz FUZZ_TIME=600` runs every target for that many seconds,
# starting from the seeds in fuzz/seeds/ plus whatever fuzz/corpus/ already holds.
FUZZ_TIME ?= 600
# AddressSanitizer for the long runs; the smoke run is built without one (the crate forbids
# unsafe code; a minute less of build and more executions in its seconds).
FUZZ_SANITIZER ?= address
FUZZ_TARGETS = http_head chunked accept_language run_input upstream_sse projection state_file config_yaml digest image subscribe_body delta_frame history_file traceparent

fuzz: fuzz-build
	cd fuzz && for t in $(FUZZ_TARGETS); do \
	  mkdir -p corpus/$$t && cp -n seeds/$$t/* corpus/$$t/ 2>/dev/null; \
	  RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run -s $(FUZZ_SANITIZER) $$t corpus/$$t -- -max_total_time=$(FUZZ_TIME) -rss_limit_mb=2048 || exit 1; \
	done

# A short run of every target (what CI does).
fuzz-smoke:
	$(MAKE) fuzz FUZZ_TIME=$${FUZZ_SMOKE_TIME:-5} FUZZ_SANITIZER=none

fuzz-build:
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	cd fuzz && RUSTC_BOOTSTRAP=1 $(CARGO) fuzz build -s $(FUZZ_SANITIZER)

# The benchmark table of the shipped static binary (demo kernel in its own process); writes
# target/bench.json. `cargo bench --bench agui` alone measures cargo's dynamic release build.
bench: static
	IAC_AGUI_BENCH_BIN=$(CURDIR)/target/x86_64-unknown-linux-gnu/release/iac-agui \
		$(CARGO) bench --bench agui

# The heap of 200 open streams by allocation site (needs heaptrack: apt-get install heaptrack).
# Symbols kept (in its own target dir), so that allocation sites have names.
census:
	CARGO_PROFILE_BENCH_STRIP=false CARGO_PROFILE_BENCH_DEBUG=limited \
		CARGO_TARGET_DIR=target/census-build $(CARGO) bench --bench agui -- census

# Which call chain took a worker's stack into its deepest page: the shipped static build with
# symbols, five open streams, each resident page of one worker's stack symbolized.
stack-probe:
	RUSTFLAGS="-C target-feature=+crt-static -C link-arg=-Wl,--icf=all" CARGO_PROFILE_RELEASE_STRIP=none CARGO_PROFILE_RELEASE_DEBUG=1 \
		$(CARGO) build --release --locked --target x86_64-unknown-linux-gnu --target-dir target/stack-probe
	python3 benches/stack_probe.py

# 1 000 concurrent streams with heartbeat timing, a burst of admissions, then 1 000 streams
# each dropped and re-attached with Last-Event-ID, counting lost or duplicated events.
load:
	$(CARGO) bench --bench agui -- load

# Two --demo pairs behind nginx with thread affinity, and the identity-header recipe of
# docs/operations.md run as written (installs nginx from Debian if missing).
fleet:
	tests/fleet/run.sh

# The browser console, and a page on another origin (--cors-origins), in headless Chromium
# (installs Debian's chromium and puppeteer-core when missing); screenshots in
# target/browser/shots/.
browser-test:
	tests/browser/run.sh

# A fully static binary (static glibc; musl is not available on this machine kind), built
# exactly as the release is (the same flags, so `make dist` reuses it).
static:
	DIST_ONLY_BUILD=1 packaging/dist.sh

# The release artifacts in dist/: the static binary's tarball (with README, operations guide,
# example config, systemd unit), the wheel, a CycloneDX SBOM and SHA256SUMS; reproducible.
dist:
	packaging/dist.sh

# Every claim about the artifacts: sums, reproducibility (two builds), contents, SBOM,
# auditwheel and a pip install beside iac-code 0.16.0 with a managed kernel, the systemd
# unit (systemd-analyze verify), the container image's root (tests/dist/).
dist-check:
	tests/dist/run.sh

# The old name of the image part of dist-check.
static-check: dist
	python3 tests/dist/image_check.py dist

clean:
	$(CARGO) clean
