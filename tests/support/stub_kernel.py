"""A stand-in for `iac-code a2a` used by the kernel-process tests.

STUB_MODE: ok (serve /health), exit (exit 3 at once), bad-sdk (the traceback iac-code 0.16.0
prints with a2a-sdk 1.3.0 on stderr, then exit 1), never-ready (serve nothing),
ignore-term (serve, ignore SIGTERM). STUB_RECORD: a file where argv, pid, the token and
IACCODE_A2A_ALLOWED_CWDS are written as JSON.
"""
import http.server
import json
import os
import signal
import sys
import time

args = sys.argv[1:]
mode = os.environ.get("STUB_MODE", "ok")
token = os.environ.get("IACCODE_A2A_HTTP_TOKEN", "")
record = os.environ.get("STUB_RECORD")
if record:
    with open(record + ".tmp", "w") as f:
        json.dump({"argv": args, "pid": os.getpid(), "token": token,
                   "allowed": os.environ.get("IACCODE_A2A_ALLOWED_CWDS")}, f)
    os.replace(record + ".tmp", record)
if mode == "exit":
    sys.exit(3)
if mode == "bad-sdk":
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "fixtures", "kernel", "a2a-sdk-1.3.0.stderr")) as f:
        sys.stderr.write(f.read())
    sys.exit(1)
if mode == "never-ready":
    time.sleep(3600)
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
port = int(args[args.index("--port") + 1])
# Plain text on stderr, as a real kernel logs: with JSON logs the adapter must relay it.
print(f"stub kernel starting on port {port}", file=sys.stderr, flush=True)


class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.headers.get("Authorization") == "Bearer " + token
        body = json.dumps({"status": "healthy"} if ok else {"error": "Unauthorized"}).encode()
        self.send_response(200 if ok and self.path == "/health" else 401)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
