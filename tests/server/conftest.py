"""Starts `splash serve` processes on loopback for the server tests.

The binary comes from SPLASH_BINARY (set by CMake), the fixtures from SPLASH_FIXTURES_DIR. Every
wait is bounded; a server that fails to start shows the tail of its log. SPLASH_SERVER_ARGS adds flags
to every server (the device script runs suites on the GPU with "--backend cuda --ranks-per-gpu 2").
"""
import json
import os
import signal
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]
BINARY = Path(os.environ.get("SPLASH_BINARY", ROOT / "build" / "splash"))
FIXTURES = Path(os.environ.get("SPLASH_FIXTURES_DIR", ROOT.parent / "shared" / "fixtures"))
MODEL = FIXTURES / "tiny-mla-a"
API_KEY = "test-key"
# 128 pages per rank = 2048 tokens per rank: small enough that a 3000-token prompt exceeds the
# KV capacity while staying inside the 4096-token context, and quick to allocate.
KV_PAGES = 128


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, model_dir, *extra, api_key=None, name="server", kv_pages=KV_PAGES, layout="dop"):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_key = api_key
        self.log = tempfile.NamedTemporaryFile(prefix=f"splash_{name}_", suffix=".log", delete=False)
        args = [str(BINARY), "serve", "--model", str(model_dir), "--ranks", "2", "--attn-layout", layout,
                "--host", "127.0.0.1", "--port", str(self.port), "--kv-pages", str(kv_pages), *extra,
                *os.environ.get("SPLASH_SERVER_ARGS", "").split()]
        if api_key:
            args += ["--api-key", api_key]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        self.wait_healthy()

    @property
    def headers(self):
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def log_tail(self, n=4000):
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-n:]

    def wait_healthy(self, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if requests.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"server not healthy after {timeout} s:\n{self.log_tail()}")

    def post(self, path, body=None, timeout=60, **kw):
        kw.setdefault("headers", self.headers)
        if body is not None and not isinstance(body, (bytes, str)):
            kw["json"] = body
        elif body is not None:
            kw["data"] = body
        return requests.post(self.url + path, timeout=timeout, **kw)

    def get(self, path, timeout=10):
        return requests.get(self.url + path, headers=self.headers, timeout=timeout)

    def metrics(self):
        """{"name{labels}": value} of /metrics."""
        out = {}
        for line in self.get("/metrics").text.splitlines():
            if line and not line.startswith("#"):
                key, value = line.rsplit(" ", 1)
                out[key] = float(value)
        return out

    def kv_used(self):
        m = self.metrics()
        return sum(v for k, v in m.items() if k.startswith("splash_kv_pages_used"))

    def wait_drained(self, timeout=20):
        """Waits until nothing runs or waits and every KV page is free; returns the last metrics."""
        deadline = time.monotonic() + timeout
        while True:
            m = self.metrics()
            used = sum(v for k, v in m.items() if k.startswith("splash_kv_pages_used"))
            if used == 0 and m["splash_num_requests_running"] == 0 and m["splash_num_requests_waiting"] == 0:
                return m
            if time.monotonic() > deadline:
                raise AssertionError(f"server did not drain: {used} pages used, metrics {m}")
            time.sleep(0.05)

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"server ignored {sig.name} for {timeout} s:\n{self.log_tail()}")
        return self.proc.returncode


def read_reference(path=MODEL / "reference.safetensors"):
    """{name: list of ints} for the I64 tensors of a safetensors file (read by hand: no numpy)."""
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "I64":
            continue
        begin, end = t["data_offsets"]
        raw = data[8 + n + begin:8 + n + end]
        out[name] = list(struct.unpack(f"<{len(raw) // 8}q", raw))
    return out


@pytest.fixture(scope="session")
def reference():
    ref = read_reference()
    prompts = sorted({k.split(".")[0] for k in ref}, key=lambda p: int(p[1:]))
    return [(ref[f"{p}.input_ids"], ref[f"{p}.greedy"]) for p in prompts]


def text_model_dir():
    """The fixture checkpoint plus the fixture tokenizer, in a temp dir, for the text endpoints."""
    d = Path(tempfile.mkdtemp(prefix="splash_text_model_"))
    for f in ("config.json", "model.safetensors"):
        (d / f).symlink_to(MODEL / f)
    (d / "tokenizer.json").symlink_to(FIXTURES / "tokenizer" / "tokenizer.json")
    return d


@pytest.fixture(scope="session")
def ids_server():
    """The fixture as it is (no tokenizer: token ids only), no API key."""
    s = Server(MODEL, name="ids")
    yield s
    assert s.stop() == 0, s.log_tail()


@pytest.fixture(scope="session")
def text_server():
    """The fixture with a tokenizer, behind an API key."""
    s = Server(text_model_dir(), "--served-model-name", "tiny-mla", api_key=API_KEY, name="text")
    yield s
    assert s.stop() == 0, s.log_tail()
