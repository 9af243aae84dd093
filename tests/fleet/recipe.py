"""The identity-header recipe of docs/operations.md ("Callers"), run as written (issue 46.4).

Its nginx block and its iac-agui command line are read from the docs, so the docs cannot
drift from what is tested; only the ports and the token are filled in. oauth2-proxy is stood
in for by an nginx location that answers its auth endpoint the same way: 202 with
X-Auth-Request-User (here the `session` cookie's value), 401 without a session. Proves: with
`--allowed-hosts agui.example.com` and a request carrying `Host: agui.example.com`, the caller
named by the proxy reaches the server (each sees only their own threads, a client's own
X-Forwarded-User is replaced), no session is refused by the proxy, iac-agui refuses requests
that did not come through it, and a Host not allowed gets a 421 that names it. Loopback
ports only; everything started is stopped.
"""
import argparse
import http.client
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from fleet import NGINX_HEAD, Failure, Pair, expect, free_port

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "operations.md")
TOKEN = "recipe-token-" + os.urandom(8).hex()
HOST = "agui.example.com"

NGINX_CONF = NGINX_HEAD + """    server {{
        listen 127.0.0.1:{port};
        server_name {host};
{recipe}
    }}
    # The stand-in for oauth2-proxy's /oauth2/auth (with --set-xauthrequest).
    server {{
        listen 127.0.0.1:{auth};
        location / {{
            if ($cookie_session = "") {{ return 401; }}
            add_header X-Auth-Request-User $cookie_session always;
            return 202;
        }}
    }}
}}
"""


def recipe():
    """The nginx block and the command line that follow the recipe's heading in the docs."""
    text = open(DOCS, encoding="utf-8").read()
    at = text.find("nginx with oauth2-proxy in front")
    expect(at >= 0, "the recipe is gone from docs/operations.md")
    m = re.compile(r"```nginx\n(.*?)```\s*```sh\n(.*?)```", re.S).search(text, at)
    expect(m, "the recipe's nginx and sh blocks are not where they were")
    block, command = m.group(1), m.group(2).strip()
    for placeholder in ("http://127.0.0.1:4180", "http://127.0.0.1:8000", "<IAC_CODE_AGUI_AUTH_TOKEN>"):
        expect(placeholder in block, f"the recipe no longer has {placeholder}")
    words = shlex.split(command)
    expect(words[0].startswith("IAC_CODE_AGUI_AUTH_TOKEN=") and words[1] == "iac-agui",
           f"the recipe's command changed: {command}")
    return block, words[2:]


def request(port, method, path, headers, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
    r = c.getresponse()
    raw = r.read()
    c.close()
    return r.status, raw


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--nginx", required=True)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="iac-agui-recipe-")
    pair, nginx, passed = None, None, False
    try:
        block, flags = recipe()
        os.environ["IAC_CODE_AGUI_AUTH_TOKEN"] = TOKEN
        os.environ["IAC_CODE_AGUI_STATE_DIR"] = os.path.join(work, "state")
        pair = Pair(args.bin, work, "recipe", flags)
        port, auth = free_port(), free_port()
        block = (block.replace("http://127.0.0.1:4180", f"http://127.0.0.1:{auth}")
                 .replace("http://127.0.0.1:8000", f"http://127.0.0.1:{pair.port}")
                 .replace("<IAC_CODE_AGUI_AUTH_TOKEN>", TOKEN))
        conf = os.path.join(work, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF.format(work=work, conns=64, port=port, auth=auth, host=HOST,
                                      recipe="\n".join("        " + line for line in block.splitlines())))
        nlog = open(os.path.join(work, "nginx.out"), "w")
        nginx = subprocess.Popen([args.nginx, "-c", conf, "-p", work], stdout=nlog, stderr=nlog)
        deadline = time.time() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                expect(time.time() < deadline and nginx.poll() is None, "nginx did not start")
                time.sleep(0.1)

        def as_user(user, **extra):
            h = {"Host": HOST, **extra}
            if user:
                h["Cookie"] = f"session={user}"
            return h

        st, raw = request(port, "GET", "/threads", as_user(None))
        expect(st == 401, f"no session: the proxy answered {st} {raw[:200]!r}")
        body = {"threadId": "recipe-1", "runId": "run-1", "state": {}, "tools": [], "context": [],
                "messages": [{"id": "m1", "role": "user", "content": "hello"}],
                "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "ros", "cwd": work}}}
        st, raw = request(port, "POST", "/", as_user("alice", **{"Content-Type": "application/json"}), body)
        expect(st == 200 and b"RUN_FINISHED" in raw, f"alice's run through the recipe: {st} {raw[:300]!r}")

        def listed(headers):
            st, raw = request(port, "GET", "/threads", headers)
            expect(st == 200, f"GET /threads through the recipe: {st} {raw[:300]!r}")
            return [t["threadId"] for t in json.loads(raw)["threads"]]

        expect(listed(as_user("alice")) == ["recipe-1"], "alice does not see her thread")
        expect(listed(as_user("bob")) == [], "bob sees alice's thread")
        # A client's own identity header is replaced by the proxy's.
        expect(listed(as_user("bob", **{"X-Forwarded-User": "alice"})) == [], "bob passed as alice")
        print("ok   recipe: the proxy's caller reaches iac-agui; alice sees her thread, bob none, "
              "a client's own X-Forwarded-User is ignored", flush=True)
        st, _ = request(pair.port, "GET", "/threads",
                        {"Host": HOST, "X-Forwarded-User": "alice"})
        expect(st == 401, f"a request around the proxy (no token) got {st}")
        st, raw = request(port, "GET", "/threads", as_user("alice", Host="other.example"))
        msg = json.loads(raw)["error"]["message"] if st == 421 else ""
        expect(st == 421 and "`other.example`" in msg and "--allowed-hosts" in msg,
               f"a Host not allowed: {st} {raw[:300]!r}")
        print("ok   recipe: a request around the proxy is 401; a Host not allowed is 421 naming it", flush=True)
        print("recipe: all checks passed", flush=True)
        passed = True
        return 0
    except Failure as f:
        print(str(f).replace("FLEET FAILED", "RECIPE FAILED"), file=sys.stderr, flush=True)
        print(f"logs kept in {work}", file=sys.stderr)
        return 1
    finally:
        if pair:
            pair.stop()
        if nginx and nginx.poll() is None:
            nginx.send_signal(signal.SIGQUIT)
            try:
                nginx.wait(10)
            except subprocess.TimeoutExpired:
                nginx.kill()
        if passed:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
