"""Real agent clients from npm, pinned, against a real `cobatch serve` of the default model with the
tool-capable ChatML template: Claude Code (`claude -p`, ANTHROPIC_BASE_URL) and Codex CLI (`codex
exec`, a provider with wire_api = "responses") complete turns with no protocol error. A recording proxy between them keeps every request and status: none may be refused
(Claude Code retries a 400 without the field it named, which would hide a field we do not take),
and the second turn of a session is read from the prefix cache (Claude Code opens its system
prompt with a billing header that changes with each prompt; the server leaves it out of the prompt,
or no turn would ever hit the cache).

A 135M model need not do the task; the client must accept every byte we send. Both run on their
default settings: Claude Code's default tools make a first request of ~12,400 tokens, past this
model's trained 8,192, so the server scales RoPE (YaRN x4: 32,768) as a user would, and the turn
takes minutes of prefill here (the stream stays alive meanwhile); Codex CLI's default configuration
offers a namespace of functions and a hosted web_search tool. Codex CLI names no output limit: the
server's -n bounds its answers."""
import http.server
import json
import os
import subprocess
import tempfile
import threading

import httpx
import pytest

from conftest import Server

# The agents' first requests are 12-20k-token prefills: minutes of llama.cpp's compute (not
# instrumented) per run. The plain build runs them; the sanitized builds check the same dialect code
# in test_anthropic.py and test_responses.py.
pytestmark = pytest.mark.skipif(bool(os.environ.get("COBATCH_SANITIZED")),
                                reason="minutes of uninstrumented prefill: the plain build runs the agents")

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, "..", "..", "templates", "chatml-tools.jinja")
CLAUDE = os.path.join(os.environ.get("COBATCH_NODE_MODULES", ""), ".bin", "claude")
CODEX = os.path.join(os.environ.get("COBATCH_NODE_MODULES", ""), ".bin", "codex")


class Recorder:
    """A proxy that passes each request to the server as it came and keeps it with its status and
    the answer's bytes (streams passed through as they arrive)."""

    def __init__(self, upstream):
        self.upstream, self.seen = upstream, []
        rec = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                entry = {"path": self.path, "headers": dict(self.headers), "body": body}
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                with httpx.Client(timeout=600) as c, \
                        c.stream(self.command, rec.upstream + self.path, content=body, headers=headers) as r:
                    self.send_response(r.status_code)
                    for k, v in r.headers.items():
                        if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                            self.send_header(k, v)
                    self.send_header("connection", "close")
                    self.end_headers()
                    out = b""
                    for chunk in r.iter_raw():
                        out += chunk
                        self.wfile.write(chunk)
                        self.wfile.flush()
                entry.update(status=r.status_code, answer=out)
                rec.seen.append(entry)

            do_GET = do_POST

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


@pytest.fixture(scope="module")
def srv():
    # the default layout and sizes, as a user starts it: an agent's ~4,000-token requests fit the
    # streams sized by memory; -n: Codex CLI names no output limit (Claude Code always does)
    s = Server("--chat-template", TEMPLATE, "--max-num-seqs", "4", "--temp", "0", "-n", "48", "--rope-scaling",
               "yarn", "--rope-scale", "4")
    rec = Recorder(s.url)
    yield s, rec
    rec.close()
    assert s.stop() == 0, s.logs()


def claude(rec, home, *args, timeout=900):
    """One turn of `claude -p`: its JSON result. The 64-token budget bounds the small model's answer;
    an answer that reaches it is a turn Claude Code ends with an error of its own (exit 1, "exceeded
    the 64 output token maximum"): the protocol held, the model talked on."""
    env = {"PATH": os.environ["PATH"], "HOME": home, "ANTHROPIC_BASE_URL": rec.url, "ANTHROPIC_API_KEY": "sk-local",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "64"}
    p = subprocess.run([CLAUDE, "-p", *args, "--output-format", "json"], cwd=home, env=env,
                       capture_output=True, text=True, timeout=timeout)
    talked_on = p.returncode == 1 and "64 output token maximum" in p.stdout
    assert p.returncode == 0 or talked_on, (p.stdout[-3000:], p.stderr[-2000:], said(rec))
    out = json.loads(p.stdout)
    assert talked_on or (not out["is_error"] and out["subtype"] == "success"), out
    return out


def said(rec):
    """What each recorded request got: its status and the answer's end (for a failure's message)."""
    return [(e["path"], e["status"], e["answer"][-700:]) for e in rec.seen]


def sse_events(answer):
    return [json.loads(line[5:]) for line in answer.decode().splitlines() if line.startswith("data:")]


def test_claude_code_completes_turns_and_the_session_stays_cached(srv):
    server, rec = srv
    home = tempfile.mkdtemp(prefix="cobatch-claude-")
    claude(rec, home, "Reply with one word: hello")
    turns = [e for e in rec.seen if e["path"].startswith("/v1/messages")]
    assert turns, [e["path"] for e in rec.seen]
    # every request taken: Claude Code would retry a refused one without the field the 400 named
    assert all(e["status"] == 200 for e in rec.seen), [(e["path"], e["status"], e["answer"][:300]) for e in rec.seen]
    body = json.loads(turns[0]["body"])
    assert body["stream"] is True and {t["name"] for t in body["tools"]} >= {"Bash", "Read", "Edit", "Write"}
    usages = [sse_events(t["answer"])[0]["message"]["usage"] for t in turns if t["answer"].startswith(b"event")]
    assert max(u["input_tokens"] + u["cache_read_input_tokens"] for u in usages) > 8192  # past the trained context
    events = sse_events(turns[-1]["answer"])
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "message_delta" in kinds, kinds
    # the next turn of the session re-sends the conversation: its prefix is read from the cache
    n = len(rec.seen)
    claude(rec, home, "--continue", "Reply with one word: bye")
    later = [e for e in rec.seen[n:] if e["path"].startswith("/v1/messages")]
    assert later and all(e["status"] == 200 for e in rec.seen[n:])
    start = sse_events(later[0]["answer"])[0]["message"]["usage"]
    read, fresh = start["cache_read_input_tokens"], start["input_tokens"]
    assert read > 0.8 * (read + fresh), start  # all but the new turn's tokens (93% here)


CODEX_CONFIG = """model = "local"
model_provider = "cobatch"

[model_providers.cobatch]
name = "cobatch"
base_url = "{url}/v1"
wire_api = "responses"
"""


def codex(rec, home, *args, timeout=400):
    """One turn of `codex exec --json`: its JSONL events. An answer that reaches the server's -n ends
    as response.incomplete, which Codex CLI reports as a failed turn of its own (exit 1, "Incomplete
    response returned, reason: max_output_tokens"): the protocol held, the model talked on."""
    env = {"PATH": os.environ["PATH"], "HOME": home, "CODEX_HOME": os.path.join(home, ".codex")}
    p = subprocess.run([CODEX, "exec", *args], cwd=home, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=timeout)
    events = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    ends = [e for e in events if e.get("type") in ("turn.completed", "turn.failed")]
    talked_on = p.returncode == 1 and ends and ends[-1].get("error", {}).get("message") == \
        "Incomplete response returned, reason: max_output_tokens"
    assert (p.returncode == 0 and ends[-1]["type"] == "turn.completed") or talked_on, \
        (p.stdout[-3000:], p.stderr[-3000:], said(rec))
    return events


def test_codex_cli_completes_turns_and_the_session_stays_cached(srv):
    server, rec = srv
    home = tempfile.mkdtemp(prefix="cobatch-codex-")
    os.makedirs(os.path.join(home, ".codex"))
    with open(os.path.join(home, ".codex", "config.toml"), "w") as f:
        f.write(CODEX_CONFIG.format(url=rec.url))
    n = len(rec.seen)
    codex(rec, home, "--json", "--skip-git-repo-check", "Reply with one word: hello")
    turns = [e for e in rec.seen[n:] if e["path"] == "/v1/responses"]
    assert turns, [e["path"] for e in rec.seen[n:]]
    # every request taken: a refused field would fail the turn
    assert all(e["status"] == 200 for e in rec.seen[n:]), said(rec)
    body = json.loads(turns[0]["body"])
    assert body["stream"] is True and body["store"] is False and "max_output_tokens" not in body, body.keys()
    kinds = {t["type"] for t in body["tools"]}
    assert "function" in kinds and "namespace" in kinds and "web_search" in kinds, kinds  # its defaults
    events = sse_events(turns[-1]["answer"])
    kinds = [e["type"] for e in events]
    assert kinds[0] == "response.created" and kinds[-1] in ("response.completed", "response.incomplete"), kinds
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    # the next turn of the session re-sends the conversation: its prefix is read from the cache
    n = len(rec.seen)
    codex(rec, home, "resume", "--last", "--json", "--skip-git-repo-check", "Reply with one word: bye")
    later = [e for e in rec.seen[n:] if e["path"] == "/v1/responses"]
    assert later and all(e["status"] == 200 for e in rec.seen[n:]), said(rec)
    # (Codex CLI's own turn.completed usage adds up the whole session; each response has its own)
    usage = sse_events(later[0]["answer"])[-1]["response"]["usage"]
    read = usage["input_tokens_details"]["cached_tokens"]
    assert read > 0.8 * usage["input_tokens"], usage  # all but the new turn's tokens (99% here)
