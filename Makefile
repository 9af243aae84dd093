# iac-agui — common tasks. `make test` is what CI runs.
CARGO ?= cargo

.PHONY: all build release run test test-fast lint fmt fuzz-build clean

all: build

build:
	$(CARGO) build

release:
	$(CARGO) build --release

run:
	$(CARGO) run --release --

# Everything CI checks: formatting, lints, and every test.
test: lint
	$(CARGO) test --all-targets

# Only the hermetic Rust tests.
test-fast:
	$(CARGO) test --all-targets

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
