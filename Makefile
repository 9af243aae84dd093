# iac-agui — common tasks. `make test` is what CI runs.
CARGO ?= cargo

.PHONY: all build release run test test-fast interop lint fmt fuzz-build clean

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
	$(CARGO) test --all-targets
	tests/interop/run.sh

# Only the hermetic Rust tests.
test-fast:
	$(CARGO) test --all-targets

interop:
	tests/interop/run.sh

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

# Compile the fuzz targets (running them is `make fuzz`, see docs/reliability.md once it exists).
fuzz-build:
	cd fuzz && RUSTC_BOOTSTRAP=1 $(CARGO) fuzz build

clean:
	$(CARGO) clean
