#!/usr/bin/env python3
"""The container image without a container runtime: its root filesystem is assembled from the
Dockerfile, and the binary is run in it as the image would run it.

Usage (as root): image_check.py DIST_DIR

- The unpack stage's COPY and RUN are carried out for real (sha256sum, tar) with its `/dist`
  and `/out` moved under a scratch directory; the final stage's COPY --from=unpack lines fill
  an empty root (with --chown); nothing else gets into it.
- USER, WORKDIR, ENV, ENTRYPOINT and HEALTHCHECK are read from the Dockerfile; the ENV must be
  exactly the environment docs/operations.md documents for the image.
- In that root, as that user, in that directory, with that environment (only host and port
  moved to 127.0.0.1:0 to stay on loopback): `ENTRYPOINT --demo` serves a demo run, the
  HEALTHCHECK command exits 0, the state file belongs to the image user, and after SIGTERM
  the process exits 0 and the health check fails.
"""

import http.client
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fail(what):
    sys.exit(f"image: {what}")


def instructions(text):
    """(stage, INSTRUCTION, arguments) of a Dockerfile, continuations joined."""
    out, stage, buf = [], None, ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        line, buf = buf + line, ""
        op, _, args = line.partition(" ")
        op = op.upper()
        if op == "FROM":
            parts = args.split()
            stage = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else "final"
        out.append((stage, op, args.strip()))
    return out


def env_pairs(args):
    return dict(tok.split("=", 1) for tok in shlex.split(args))


def documented_env():
    """`NAME=value` pairs the container section of docs/operations.md names."""
    doc = open(os.path.join(ROOT, "docs/operations.md"), encoding="utf-8").read()
    section = doc.split("## A `FROM scratch` container", 1)[1].split("\n## ", 1)[0]
    return dict(m.split("=", 1) for m in re.findall(r"`([A-Z][A-Z0-9_]*=[^`\s]*)`", section))


def main():
    dist = os.path.abspath(sys.argv[1])
    steps = instructions(open(os.path.join(ROOT, "Dockerfile"), encoding="utf-8").read())
    scratch = tempfile.mkdtemp(prefix="iac-agui-image-")
    try:
        check(dist, steps, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print("image: ok (root assembled from the Dockerfile, demo run, health check, drain)")


def check(dist, steps, scratch):
    build, root = os.path.join(scratch, "unpack"), os.path.join(scratch, "root")
    os.makedirs(build)
    os.makedirs(root)
    os.chmod(root, 0o755)
    moved = lambda s: s.replace("/dist", build + "/dist").replace("/out", build + "/out")
    final = {"ENV": {}, "USER": None, "WORKDIR": "/", "ENTRYPOINT": None, "HEALTHCHECK": None}
    for stage, op, args in steps:
        if stage == "unpack" and op == "COPY":
            *srcs, dst = args.split()
            os.makedirs(moved(dst), exist_ok=True)
            for pattern in srcs:
                rel = pattern.removeprefix("dist/")
                matches = [f for f in os.listdir(dist) if re.fullmatch(rel.replace(".", r"\.").replace("*", ".*"), f)]
                if not matches:
                    fail(f"COPY {pattern}: nothing in {dist}")
                for m in matches:
                    shutil.copy2(os.path.join(dist, m), moved(dst))
        elif stage == "unpack" and op == "RUN":
            r = subprocess.run(["bash", "-ec", moved(args)], capture_output=True, text=True)
            if r.returncode != 0:
                fail(f"RUN failed ({r.returncode}): {r.stdout}{r.stderr}")
        elif stage == "final" and op == "COPY":
            toks = args.split()
            opts = [t for t in toks if t.startswith("--")]
            src, dst = [t for t in toks if not t.startswith("--")]
            if "--from=unpack" not in opts:
                fail(f"a final-stage COPY from outside the unpack stage: {args}")
            target = root + dst
            if os.path.isdir(moved(src)):
                shutil.copytree(moved(src), target)
            else:
                shutil.copy2(moved(src), target)
            for o in opts:
                if o.startswith("--chown="):
                    uid, gid = (int(x) for x in o.split("=", 1)[1].split(":"))
                    os.chown(target, uid, gid)
        elif stage == "final" and op == "ENV":
            final["ENV"].update(env_pairs(args))
        elif stage == "final" and op in ("USER", "WORKDIR"):
            final[op] = args
        elif stage == "final" and op == "ENTRYPOINT":
            final["ENTRYPOINT"] = json.loads(args)
        elif stage == "final" and op == "HEALTHCHECK":
            final["HEALTHCHECK"] = json.loads(args.split(" CMD ", 1)[1])
    if sorted(os.listdir(root)) != ["iac-agui", "state", "workspace"]:
        fail(f"the image root holds {sorted(os.listdir(root))}")
    doc = documented_env()
    if doc != final["ENV"]:
        fail(f"the image's ENV {final['ENV']} is not what docs/operations.md documents: {doc}")
    uid, gid = (int(x) for x in final["USER"].split(":"))
    workdir = final["WORKDIR"]

    def in_image(argv, env_over=None, **kw):
        env = dict(final["ENV"], **(env_over or {}))

        def enter():
            os.chroot(root)
            os.chdir(workdir)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        return subprocess.Popen(argv, env=env, preexec_fn=enter, **kw)

    loopback = {"IAC_CODE_AGUI_HOST": "127.0.0.1", "IAC_CODE_AGUI_PORT": "0"}
    server = in_image(final["ENTRYPOINT"] + ["--demo"], loopback, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        deadline = time.time() + 20
        while time.time() < deadline and url is None:
            line = server.stderr.readline()
            if not line:
                break
            rec = json.loads(line)  # the image logs JSON: every line must parse
            if rec.get("msg") == "listening":
                url = rec["url"]
        if not url:
            fail("no ready line")
        host, port = url.removeprefix("http://").rsplit(":", 1)
        hc = in_image(final["HEALTHCHECK"] + [f"{url}/health"])
        if hc.wait(10) != 0:
            fail("the HEALTHCHECK command failed")
        body = {"threadId": "s", "runId": "r", "state": {}, "tools": [], "context": [],
                "messages": [{"id": "m", "role": "user", "content": "hello"}],
                "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "x", "cwd": "/workspace/s"}}}
        c = http.client.HTTPConnection(host, int(port), timeout=20)
        c.request("POST", "/", body=json.dumps(body), headers={"Content-Type": "application/json"})
        out = c.getresponse().read().decode()
        if '"outcome":{"type":"success"}' not in out:
            fail(f"the demo run failed: {out[:500]}")
        state = os.path.join(root, "state/threads/s.json")
        if not os.path.isfile(state) or os.stat(state).st_uid != uid:
            fail("no state file of the image user in /state")
        server.terminate()
        if server.wait(20) != 0:
            fail(f"exit {server.returncode} after SIGTERM")
        for line in server.stderr:
            json.loads(line)
        hc = in_image(final["HEALTHCHECK"] + [f"{url}/health"], stderr=subprocess.DEVNULL)
        if hc.wait(10) == 0:
            fail("the health check passed with the server stopped")
    finally:
        if server.poll() is None:
            server.kill()


if __name__ == "__main__":
    main()
