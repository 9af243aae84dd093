#!/usr/bin/env python3
"""Build the iac-agui wheel from the release binary (stdlib only, reproducible).

Usage: wheel.py --bin PATH --out DIR [--tag PLATFORM_TAG ...]

The wheel holds only the binary, as `iac_agui-<v>.data/scripts/iac-agui`: pip installs it
into the environment's `bin/`, beside the `iac-code` of the same environment (which iac-agui
then starts by default). The plain wheel has no dependencies (sidecars with --a2a-url); its
`kernel` extra brings iac-code 0.16.0 with an a2a-sdk it starts with (KERNEL_REQUIRES; the
range is src/kernel/diagnose.rs's, which a test holds equal). Entries are sorted, dated SOURCE_DATE_EPOCH and given fixed modes,
so the same binary always gives the same wheel bytes.
"""

import argparse
import base64
import hashlib
import os
import sys
import time
import tomllib
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# What `pip install 'iac_agui-….whl[kernel]'` adds: iac-code 0.16.0 does not start with
# a2a-sdk 1.2.1 or later, which its own `[a2a]` extra allows.
KERNEL_REQUIRES = [
    "iac-code[a2a]==0.16.0",
    "a2a-sdk[http-server,signing]>=1.0.2,<1.2.1",
]


def record_hash(data):
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--tag", action="append", required=True, help="a platform tag, e.g. manylinux_2_17_x86_64")
    args = p.parse_args()
    with open(os.path.join(ROOT, "Cargo.toml"), "rb") as f:
        pkg = tomllib.load(f)["package"]
    name, version = pkg["name"].replace("-", "_"), pkg["version"]
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    with open(args.bin, "rb") as f:
        binary = f.read()
    dist_info = f"{name}-{version}.dist-info"
    metadata = "\n".join([
        "Metadata-Version: 2.1",
        f"Name: {pkg['name']}",
        f"Version: {version}",
        f"Summary: {pkg['description']}",
        f"License: {pkg['license']}",
        "Requires-Python: >=3.8",
        "Provides-Extra: kernel",
        *[f'Requires-Dist: {r} ; extra == "kernel"' for r in KERNEL_REQUIRES],
        "Classifier: Operating System :: POSIX :: Linux",
        "Classifier: Programming Language :: Rust",
        "Description-Content-Type: text/markdown",
        "",
        readme,
    ])
    tags = sorted(set(args.tag))
    wheel = "\n".join(["Wheel-Version: 1.0", "Generator: iac-agui packaging/wheel.py", "Root-Is-Purelib: false"]
                      + [f"Tag: py3-none-{t}" for t in tags]) + "\n"
    files = [
        (f"{name}-{version}.data/scripts/iac-agui", binary, 0o755),
        (f"{dist_info}/METADATA", metadata.encode(), 0o644),
        (f"{dist_info}/WHEEL", wheel.encode(), 0o644),
    ]
    record = "".join(f"{path},{record_hash(data)},{len(data)}\n" for path, data, _ in files)
    record += f"{dist_info}/RECORD,,\n"
    files.append((f"{dist_info}/RECORD", record.encode(), 0o644))
    epoch = max(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")), 315532800)
    date = time.gmtime(epoch)[:6]
    os.makedirs(args.out, exist_ok=True)
    out = os.path.join(args.out, f"{name}-{version}-py3-none-{'.'.join(tags)}.whl")
    with zipfile.ZipFile(out + ".tmp", "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        # RECORD last, everything else in a fixed order: the dist-info metadata after the data.
        for path, data, mode in files:
            info = zipfile.ZipInfo(path, date_time=date)
            info.external_attr = (0o100000 | mode) << 16
            info.create_system = 3
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    os.replace(out + ".tmp", out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
