#!/usr/bin/env python3
"""Which call chain took a worker's stack into its deepest page (`make stack-probe`).

A worker's resident stack is the deepest it has ever been, and it stays resident as long as its
stream (docs/performance.md). A frame's return address stays in memory after the frame returns,
so the code addresses left in each resident page of a live worker's stack name the calls that
reached it. This starts the demo kernel and the static build with symbols (BIN), holds five
streams open (`wait 30`), and prints each resident page of one worker's stack, top first, with
the code addresses found in it (distance from the stack's top in bytes, and the innermost function
at that address, inlined or not).

Needs binutils (addr2line) and curl; Linux only (/proc/PID/pagemap, root).
"""

import os
import re
import struct
import subprocess
import sys
import tempfile
import time

BIN = sys.argv[1] if len(sys.argv) > 1 else "target/stack-probe/x86_64-unknown-linux-gnu/release/iac-agui"
STACK = 1 << 20  # limits::WORKER_STACK_BYTES
NOISE = ("malloc", "free", "clock_gettime", "memcpy", "memcmp", "mempcpy", "errno", "syscall", "libc_setup")


def listening(proc):
    for line in proc.stderr:
        m = re.search(r"listening on (http://[0-9.:]+)", line)
        if m:
            return m.group(1)
    sys.exit("no ready line")


def worker_stacks(pid):
    """(low, high) of each 1 MiB read-write anonymous mapping: the worker and call threads."""
    out = []
    for line in open(f"/proc/{pid}/maps"):
        f = line.split()
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        if hi - lo == STACK and f[1].startswith("rw") and len(f) < 6:
            out.append((lo, hi))
    return out


def resident(pid, lo, hi):
    with open(f"/proc/{pid}/pagemap", "rb") as pm:
        pages = []
        for p in range(lo, hi, 4096):
            pm.seek(p // 4096 * 8)
            if struct.unpack("<Q", pm.read(8))[0] >> 63:
                pages.append(p)
        return pages


def text_of(pid):
    base = text = None
    for line in open(f"/proc/{pid}/maps"):
        f = line.split()
        if len(f) >= 6 and f[5] == os.path.realpath(BIN):
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            if base is None:
                base = lo - int(f[2], 16)
            if "x" in f[1]:
                text = (lo, hi)
    return base, text


def main():
    tmp = tempfile.mkdtemp(prefix="iac-agui-stack-probe-")
    os.makedirs(f"{tmp}/ws")
    env = dict(os.environ, RUST_LOG="warn", IAC_CODE_AGUI_STATE_DIR=f"{tmp}/state", IAC_CODE_AGUI_ALLOWED_CWDS=tmp)
    kernel = subprocess.Popen([BIN, "--demo-kernel-only", "0"], stderr=subprocess.PIPE, text=True, env=env)
    procs = [kernel]
    try:
        k = listening(kernel)
        adapter = subprocess.Popen([BIN, "--port", "0", "--a2a-url", k + "/"], stderr=subprocess.PIPE, text=True, env=env)
        procs.append(adapter)
        a = listening(adapter)
        for i in range(5):
            body = (
                f'{{"threadId":"t{i}","runId":"r{i}","state":{{}},"tools":[],"context":[],'
                f'"messages":[{{"id":"m","role":"user","content":"wait 30"}}],'
                f'"forwardedProps":{{"iacCode":{{"schemaVersion":1,"rosInvocationId":"ros","cwd":"{tmp}/ws"}}}}}}'
            )
            procs.append(subprocess.Popen(["curl", "-sN", "-o", "/dev/null", "-X", "POST", a + "/",
                                           "-H", "Content-Type: application/json", "-d", body]))
        time.sleep(2)
        pid = adapter.pid
        base, text = text_of(pid)
        if text is None:
            sys.exit(f"{BIN} is not mapped by the server (another binary ran?)")
        stacks = [(lo, hi, resident(pid, lo, hi)) for lo, hi in worker_stacks(pid)]
        print("resident KiB of each 1 MiB stack:", [len(p) * 4 for _, _, p in stacks])
        # A worker is the stack whose pages hold the run's driver.
        mem = open(f"/proc/{pid}/mem", "rb")
        for lo, hi, pages in stacks:
            found = []
            for p in sorted(pages, reverse=True):
                mem.seek(p)
                data = mem.read(4096)
                for off in range(0, 4096, 8):
                    w = struct.unpack_from("<Q", data, off)[0]
                    if text[0] <= w < text[1]:
                        found.append(((hi - p) // 4096, hi - p - off, w - base - 1))
            if not found:
                continue
            names = subprocess.run(["addr2line", "-f", "-C", "-e", BIN] + [hex(a) for _, _, a in found],
                                   capture_output=True, text=True).stdout.splitlines()[0::2]
            if not any("adapter::drive" in n or "driver::Run" in n for n in names):
                continue
            print(f"one worker: {len(pages) * 4} KiB resident")
            page = None
            for (pg, depth, _), name in sorted(zip(found, names), key=lambda x: x[0][1]):
                if any(n in name for n in NOISE):
                    continue
                if pg != page:
                    page = pg
                    print(f"== page {pg} from the top")
                print(f"  {depth:6d}  {name[:120]}")
            break
    finally:
        for p in procs:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
