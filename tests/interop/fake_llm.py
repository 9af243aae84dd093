"""A scripted OpenAI-compatible chat-completions server for the interop suite (stdlib only).

The reply depends on the conversation: keywords in the first user message pick a scenario,
and a tool result in the history moves it on. Streaming (SSE with `data: [DONE]`) and plain
JSON answers are both served; reasoning arrives as `reasoning_content` deltas.

Scenarios (keyword in the user's message):
  llm-error  -> HTTP 400 every time
  slow       -> a long answer streamed slowly (cancel / disconnect tests); keyed on the latest
                user message, so the turn after a stopped slow one is a short answer
  think      -> reasoning, then an answer
  bash       -> a bash tool call that needs permission, then an answer after the result
  vswitch    -> a select_cloud_resource call (a VSwitch, when the kernel offers its resource
                selector), then an answer quoting the tool's result
  (pipeline) -> ask_user_question, then complete_step (when those tools are offered)
  otherwise  -> a short answer
"""

import itertools
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def text_of(content):
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def first_user_text(messages):
    for m in messages:
        if m.get("role") == "user":
            return text_of(m.get("content")).lower()
    return ""


def last_user_text(messages):
    for m in reversed(messages):
        if m.get("role") == "user":
            return text_of(m.get("content")).lower()
    return ""


def tool_results(messages):
    """Names of the tools whose results are in the history, in order."""
    calls = {}
    for m in messages:
        for c in m.get("tool_calls") or []:
            calls[c.get("id")] = (c.get("function") or {}).get("name")
    return [calls.get(m.get("tool_call_id")) for m in messages if m.get("role") == "tool"]


def tool_names(req):
    return {(t.get("function") or {}).get("name") for t in req.get("tools") or []}


# The "selling" pipeline's intent step (iac-code 0.16.0) requires is_infra_intent and
# confidence, and a category from its enum; a conclusion outside that schema fails the step
# (and the run) after the kernel's own retry.
COMPLETE_STEP_CONCLUSION = {
    "is_infra_intent": False,
    "confidence": "high",
    "category": "other",
    "rejection_reason": "The user chose not to deploy now.",
}


CALLS = itertools.count(1)


def next_call_id():
    """A fresh tool-call id per call, as real models give (clients key tool calls by it)."""
    return f"call_fake_{next(CALLS)}"


def plan(req):
    """What to answer: (reasoning, text, tool_call or None)."""
    messages = req.get("messages") or []
    user = first_user_text(messages)
    done = tool_results(messages)
    tools = tool_names(req)
    if "ask_user_question" in tools and "complete_step" in tools:
        if "complete_step" in done:
            return ("", "Step done.", None)
        if "ask_user_question" in done:
            return ("", "", ("complete_step", {"conclusion": COMPLETE_STEP_CONCLUSION}))
        question = {
            "question": "What do you want to deploy?",
            "options": [{"id": "website", "label": "A website"}, {"id": "skip", "label": "Not now"}],
            "allow_free_text": True,
        }
        return ("Need to clarify the goal.", "Let me ask one question.", ("ask_user_question", question))
    if "vswitch" in user and "select_cloud_resource" in tools:
        if "select_cloud_resource" in done:
            result = [text_of(m.get("content")) for m in messages if m.get("role") == "tool"][-1]
            return ("", "Selection: " + result, None)
        args = {"question": "Which VSwitch should the instance use?", "selector_id": "vpc.vswitch",
                "association_property_metadata": {"RegionId": "cn-hangzhou", "VpcId": "vpc-interop"}}
        return ("", "I need a VSwitch.", ("select_cloud_resource", args))
    if "bash" in user:
        if "bash" in done:
            return ("", "The command finished.", None)
        return ("The user wants a file. I will use bash.", "I'll create it.", ("bash", {"command": "touch created.txt"}))
    if "echo the turn" in last_user_text(messages):
        # What the model was given as the user's turn, back as the answer: the interop suite
        # checks that AG-UI `context[]` reached the model.
        return ("", last_user_text(messages), None)
    if "think" in user:
        return ("Let me think about this. ", "Here is my considered answer.", None)
    if "slow" in last_user_text(messages):
        return ("", "".join(f"tick {i}. " for i in range(1, 41)), None)
    return ("", "Hello from the fake model.", None)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": "fake-model", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        req = json.loads(self.rfile.read(length) or b"{}")
        user = first_user_text(req.get("messages") or [])
        if "llm-error" in user:
            # A 400 is not retried by the kernel (5xx would be, with backoff).
            body = b'{"error":{"message":"scripted provider failure","type":"invalid_request_error"}}'
            self.send_response(400)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        reasoning, text, tool = plan(req)
        if req.get("stream"):
            self.stream(reasoning, text, tool, slow="slow" in user)
        else:
            self.plain(reasoning, text, tool)

    def chunk(self, delta, finish=None, usage=None):
        c = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": "fake-model",
             "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}]}
        if usage:
            c["usage"] = usage
        data = b"data: " + json.dumps(c).encode() + b"\n\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def stream(self, reasoning, text, tool, slow):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self.chunk({"role": "assistant", "content": ""})
        if reasoning:
            for part in reasoning.split(". "):
                self.chunk({"reasoning_content": part})
        words = text.split(" ")
        for i, w in enumerate(words):
            self.chunk({"content": w + (" " if i + 1 < len(words) else "")})
            if slow:
                time.sleep(0.15)
        finish = "stop"
        if tool:
            name, args = tool
            self.chunk({"tool_calls": [{"index": 0, "id": next_call_id(), "type": "function",
                                        "function": {"name": name, "arguments": ""}}]})
            self.chunk({"tool_calls": [{"index": 0, "function": {"arguments": json.dumps(args)}}]})
            finish = "tool_calls"
        self.chunk({}, finish=finish)
        self.chunk(None, usage={"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120})
        data = b"data: [DONE]\n\n"
        self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))
        self.wfile.flush()

    def plain(self, reasoning, text, tool):
        msg = {"role": "assistant", "content": text}
        if reasoning:
            msg["reasoning_content"] = reasoning
        finish = "stop"
        if tool:
            name, args = tool
            msg["tool_calls"] = [{"id": next_call_id(), "type": "function",
                                  "function": {"name": name, "arguments": json.dumps(args)}}]
            finish = "tool_calls"
        body = json.dumps({"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": "fake-model",
                           "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
                           "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # clients that hang up mid-stream (disconnect tests) are expected


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    srv = Server(("127.0.0.1", port), Handler)
    print(srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
