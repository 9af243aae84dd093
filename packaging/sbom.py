#!/usr/bin/env python3
"""The release SBOM: cargo-cyclonedx's CycloneDX 1.5 JSON, made exact and reproducible.

Usage: sbom.py --out FILE --target TRIPLE

cargo-cyclonedx resolves optional dependencies loosely (it listed crates that only the dev
build uses); the components are cut to what `cargo tree -e normal` says the release build of
the default features uses for TARGET. The checkout path is replaced by a fixed name, the
timestamp is SOURCE_DATE_EPOCH and the serial number is derived from Cargo.lock, so the same
commit always gives the same file.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def linked(target):
    """(name, version) of every crate the release build uses (normal dependencies)."""
    out = subprocess.run(["cargo", "tree", "-e", "normal", "--target", target, "--prefix", "none",
                          "--format", "{p}", "--locked"], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout
    crates = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1].startswith("v"):
            crates.add((parts[0], parts[1][1:]))
    return crates


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--target", required=True)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["cargo", "cyclonedx", "-q", "-f", "json", "--spec-version", "1.5", "--no-build-deps",
                        "--target", args.target, "--override-filename", "bom"], cwd=ROOT, check=True)
        src = os.path.join(ROOT, "bom.json")
        with open(src, encoding="utf-8") as f:
            bom = json.load(f)
        os.replace(src, os.path.join(tmp, "bom.json"))
    want = linked(args.target)
    comps = [c for c in bom["components"] if (c["name"], c["version"]) in want]
    refs = {c["bom-ref"] for c in comps} | {bom["metadata"]["component"]["bom-ref"]}
    bom["components"] = comps
    bom["dependencies"] = [
        {"ref": d["ref"], "dependsOn": [x for x in d.get("dependsOn", []) if x in refs]}
        for d in bom.get("dependencies", []) if d["ref"] in refs
    ]
    missing = want - {(c["name"], c["version"]) for c in comps} - {(bom["metadata"]["component"]["name"],
                                                                  bom["metadata"]["component"]["version"])}
    if missing:
        print(f"sbom: cargo-cyclonedx left out {sorted(missing)}", file=sys.stderr)
        return 1
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    bom["metadata"]["timestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    with open(os.path.join(ROOT, "Cargo.lock"), "rb") as f:
        lock = hashlib.sha256(f.read()).hexdigest()
    bom["serialNumber"] = "urn:uuid:" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"iac-agui:{lock}:{epoch}"))
    text = json.dumps(bom, indent=2, sort_keys=True) + "\n"
    # The checkout's path is this machine's business, not the SBOM's.
    text = text.replace("file://" + ROOT, "file:///iac-agui").replace(ROOT, "/iac-agui")
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"sbom: {len(comps)} crates", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
