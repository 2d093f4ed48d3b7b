"""Fixtures: real `cobatch serve` processes on free local ports."""
import os
import signal
import subprocess
import tempfile
import time

import httpx
import pytest

BIN = os.environ["COBATCH_BIN"]
MODEL = os.environ["COBATCH_E2E_MODEL"]


class Server:
    def __init__(self, *args, preexec=None, env=None):
        self.dir = tempfile.mkdtemp(prefix="cobatch-e2e-")
        port_file = os.path.join(self.dir, "port")
        self.log_path = os.path.join(self.dir, "server.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [BIN, "serve", "-m", MODEL, "--port", "0", "--port-file", port_file, *args],
            stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=preexec,
            env={**os.environ, **(env or {})})
        deadline = time.time() + 120
        self.port = None
        while time.time() < deadline and self.port is None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.logs()}")
            try:
                self.port = int(open(port_file).read().strip())
            except (OSError, ValueError):
                time.sleep(0.05)
        assert self.port, "server did not start"
        self.url = f"http://127.0.0.1:{self.port}"

    def logs(self):
        return open(self.log_path).read()

    def metrics(self):
        text = httpx.get(self.url + "/metrics", timeout=10).text
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name.split("{")[0] if "le=" not in name else name] = float(value)
        return out

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self.log.close()


@pytest.fixture(scope="module")
def server():
    # greedy unless a request says otherwise (an operator's default; OpenAI's is temperature 1):
    # these tests compare texts across streamed and whole answers and across clients
    s = Server("--max-num-seqs", "8", "--max-num-batched-tokens", "256", "--prefill-chunk", "64", "--temp", "0")
    yield s
    assert s.stop() == 0, s.logs()
