"""The server under pressure and at the HTTP level: answerable while saturated, a bounded queue,
disconnects aborted whatever the encoding, early errors that never desync a keep-alive connection,
and 405/411/413. HTTP-level checks use raw sockets; every wait is bounded."""
import gzip
import json
import signal
import socket
import threading
import time

import pytest
import requests

from conftest import API_KEY, MODEL, Server

STREAMS = 300
LONG = {"prompt": [5, 6, 7], "max_tokens": 2000, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def busy_server():
    """Runs 4 requests at a time, so most of many open requests wait in the engine's queue."""
    s = Server(MODEL, "--max-running-requests", "4", api_key=API_KEY, name="busy", kv_pages=256)
    yield s
    assert s.stop() == 0, s.log_tail()


@pytest.fixture(scope="module")
def small_server():
    """Tight limits: 2 running, 4 queued, 4 KiB bodies, 24 connections, 1 s keep-alive."""
    s = Server(MODEL, "--max-running-requests", "2", "--max-queued-requests", "4", "--max-request-bytes", "4096",
               "--max-connections", "24", "--keep-alive-timeout", "1", name="small")
    yield s
    assert s.stop() == 0, s.log_tail()


def connect(server, timeout=10):
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def request_bytes(method, path, body=b"", headers=None, length=True):
    head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if length:
        head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def post_bytes(path, payload, headers=None):
    return request_bytes("POST", path, json.dumps(payload).encode(), {"Content-Type": "application/json", **(headers or {})})


def read_response(f):
    """(status, {lowercased header: value}, body) of the next response on file `f`; None at end of stream."""
    line = f.readline()
    if not line:
        return None
    status = int(line.split()[1])
    headers = {}
    while (line := f.readline()) not in (b"\r\n", b""):
        k, v = line.decode().split(":", 1)
        headers[k.strip().lower()] = v.strip()
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while (size := int(f.readline().split(b";")[0], 16)) > 0:
            body += f.read(size)
            f.readline()
        f.readline()
    else:
        body = f.read(int(headers.get("content-length", 0)))
    return status, headers, body


def responses(sock):
    """Every response the server sends on `sock` until it closes the connection or goes quiet."""
    f = sock.makefile("rb")
    out = []
    try:
        while (r := read_response(f)) is not None:
            out.append(r)
    except (socket.timeout, ConnectionError):
        pass
    return out


def open_stream(server, payload):
    sock = connect(server)
    sock.sendall(post_bytes("/v1/completions", payload, {"Authorization": f"Bearer {API_KEY}"}))
    return sock


def wait_metric(server, name, predicate, timeout=20):
    deadline = time.monotonic() + timeout
    while not predicate(value := server.metrics()[name]):
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} = {value} after {timeout} s")
        time.sleep(0.05)
    return value


def timed_get(server, path):
    t0 = time.monotonic()
    r = server.get(path, timeout=5)
    return r, time.monotonic() - t0


def aborted(server):
    return server.metrics()['splash_requests_finished_total{reason="abort"}']


def test_health_answers_while_hundreds_of_streams_wait(busy_server):
    socks = [open_stream(busy_server, {**LONG, "stream": True}) for _ in range(STREAMS)]
    try:
        # Every request reaches the engine: the ones beyond the 4 running wait there, counted.
        wait_metric(busy_server, "splash_num_requests_waiting", lambda v: v >= STREAMS - 4)
        for path in ("/health", "/metrics", "/v1/models"):
            r, seconds = timed_get(busy_server, path)
            assert r.status_code == 200 and seconds < 1, (path, r.status_code, seconds)
        t0 = time.monotonic()
        assert busy_server.post("/abort_request", {"rid": "no-such-request"}, timeout=5).status_code == 200
        assert time.monotonic() - t0 < 1
        assert busy_server.kv_used() > 0
    finally:
        for s in socks:
            s.close()
    # Closed clients are aborted, the waiting ones included, and every page comes back.
    busy_server.wait_drained(timeout=20)


def test_queue_limit_answers_429_and_the_others_complete(small_server):
    # Two long streams run; four short requests wait behind them, filling the queue.
    long = [open_stream(small_server, {**LONG, "stream": True}) for _ in range(2)]
    wait_metric(small_server, "splash_num_requests_running", lambda v: v == 2)
    results = [None] * 4

    def run(i):
        results[i] = small_server.post("/v1/completions", {**LONG, "max_tokens": 16}, timeout=60)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    wait_metric(small_server, "splash_num_requests_waiting", lambda v: v == 4)
    t0 = time.monotonic()
    r = small_server.post("/v1/completions", {**LONG, "max_tokens": 4})
    assert r.status_code == 429 and time.monotonic() - t0 < 1, r.text
    assert r.headers["Retry-After"] == "1"
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    for sock in long:
        sock.close()
    for t in threads:
        t.join(60)
    assert [x.status_code for x in results] == [200] * 4
    assert all(x.json()["usage"]["completion_tokens"] == 16 for x in results)
    small_server.wait_drained()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("encoding", ["gzip", "identity"])
def test_disconnect_aborts_whatever_the_encoding(busy_server, stream, encoding):
    busy_server.wait_drained()
    before = aborted(busy_server)
    headers = {**busy_server.headers, "Accept-Encoding": encoding}
    if stream:
        r = busy_server.post("/v1/completions", {**LONG, "stream": True}, headers=headers, stream=True)
        next(r.iter_lines())
        r.close()
    else:
        # The client gives up on the body; a gzip response's writes are buffered and never fail.
        with pytest.raises((requests.Timeout, requests.ConnectionError)):
            busy_server.post("/v1/completions", LONG, headers=headers, timeout=0.5)
    t0 = time.monotonic()
    busy_server.wait_drained(timeout=5)
    assert time.monotonic() - t0 < 2
    assert aborted(busy_server) == before + 1


def test_gzip_response_still_works(busy_server):
    sock = connect(busy_server)
    sock.sendall(post_bytes("/v1/completions", {**LONG, "max_tokens": 4},
                           {"Authorization": f"Bearer {API_KEY}", "Accept-Encoding": "gzip", "Connection": "close"}))
    [(status, headers, body)] = responses(sock)
    assert status == 200 and headers.get("content-encoding") == "gzip"
    assert json.loads(gzip.decompress(body))["usage"]["completion_tokens"] == 4


# A body that is itself an HTTP request: parsed as the next request, it would answer /health.
SMUGGLED = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def assert_no_desync(server, first, expected_status):
    """`first`, then GET /v1/models on the same connection: never an answer to the smuggled body."""
    sock = connect(server, timeout=3)
    auth = {"Authorization": f"Bearer {API_KEY}"} if server.api_key else {}
    sock.sendall(first + request_bytes("GET", "/v1/models", headers=auth))
    got = responses(sock)
    sock.close()
    assert got and got[0][0] == expected_status, got
    assert "error" in json.loads(got[0][2])
    # Either the server closed after the error (and said so) or the next answer is the models list.
    if len(got) == 1:
        assert got[0][1].get("connection") == "close"
    else:
        assert len(got) == 2 and got[1][0] == 200 and json.loads(got[1][2])["object"] == "list", got


def test_401_with_body_does_not_desync(busy_server):
    assert_no_desync(busy_server, request_bytes("POST", "/v1/completions", SMUGGLED), 401)


def test_405_with_body_does_not_desync(busy_server):
    assert_no_desync(busy_server, request_bytes("PUT", "/v1/completions", SMUGGLED,
                                                {"Authorization": f"Bearer {API_KEY}"}), 405)


def test_413_before_reading_the_body(small_server):
    sock = connect(small_server, timeout=3)
    # Only the headers and a little of the promised megabyte: the answer must not wait for the rest.
    sock.sendall(request_bytes("POST", "/v1/completions", length=False,
                               headers={"Content-Length": 1 << 20, "Content-Type": "application/json"}) + b"{" * 100)
    t0 = time.monotonic()
    [(status, headers, body)] = responses(sock)
    assert status == 413 and time.monotonic() - t0 < 1
    assert headers.get("connection") == "close" and "error" in json.loads(body)
    sock.close()
    # A chunked body has no length to check first: it is cut off once it passes the limit.
    sock = connect(small_server, timeout=3)
    chunks = b"".join(b"400\r\n" + b" " * 1024 + b"\r\n" for _ in range(8)) + b"0\r\n\r\n"
    sock.sendall(request_bytes("POST", "/v1/completions", length=False, headers={"Transfer-Encoding": "chunked"}) + chunks)
    [(status, headers, _)] = responses(sock)
    assert status == 413 and headers.get("connection") == "close"
    sock.close()
    # Under the limit a body is served as usual; over it, 413 through an ordinary client too.
    body = json.dumps({"prompt": [5], "max_tokens": 1}).encode()
    assert small_server.post("/v1/completions", body + b" " * (4096 - len(body))).status_code == 200
    r = small_server.post("/v1/completions", body + b" " * (4097 - len(body)))
    assert r.status_code == 413 and "--max-request-bytes" in r.json()["error"]["message"]


def test_405_names_the_allowed_methods(small_server):
    for method, path, allow in [("GET", "/v1/completions", "POST"), ("POST", "/health", "GET, HEAD"),
                                ("DELETE", "/v1/models", "GET, HEAD")]:
        sock = connect(small_server, timeout=3)
        sock.sendall(request_bytes(method, path, length=method == "POST", headers={"Connection": "close"}))
        [(status, headers, body)] = responses(sock)
        assert (status, headers.get("allow")) == (405, allow), (method, path)
        assert json.loads(body)["error"]["type"] == "invalid_request_error"
        sock.close()
    assert small_server.get("/no/such/path").status_code == 404


def test_411_for_a_body_without_length(small_server):
    sock = connect(small_server, timeout=3)
    t0 = time.monotonic()
    sock.sendall(request_bytes("POST", "/v1/completions", length=False) + b'{"prompt": [5]}')
    [(status, headers, _)] = responses(sock)
    assert status == 411 and time.monotonic() - t0 < 1 and headers.get("connection") == "close"
    sock.close()


def test_bodyless_post_without_length_is_answered_at_once(small_server):
    # `curl -X POST URL` sends no Content-Length: a route that takes no body answers it as an empty one,
    # and the connection stays usable.
    sock = connect(small_server, timeout=3)
    t0 = time.monotonic()
    sock.sendall(request_bytes("POST", "/flush_cache", length=False) + request_bytes("GET", "/health"))
    f = sock.makefile("rb")
    flushed, health = read_response(f), read_response(f)
    assert (flushed[0], health[0]) == (200, 200) and time.monotonic() - t0 < 1
    assert json.loads(flushed[2])["success"] is True
    sock.close()


def test_malformed_chunk_closes_the_connection(small_server):
    # httplib answers a broken chunk size with 400; what follows on the socket is not a request.
    sock = connect(small_server, timeout=3)
    sock.sendall(request_bytes("POST", "/v1/completions", headers={"Transfer-Encoding": "chunked"}, length=False)
                 + b"zz\r\n" + request_bytes("GET", "/health"))
    got = responses(sock)
    assert [status for status, _, _ in got] == [400] and got[0][1].get("connection") == "close"
    sock.close()


def open_connections_on(sock):
    """splash_http_connections_open read over `sock`, a kept-alive connection that counts itself."""
    sock.sendall(request_bytes("GET", "/metrics"))
    status, _, body = read_response(sock.makefile("rb"))
    assert status == 200
    [line] = [l for l in body.decode().splitlines() if l.startswith("splash_http_connections_open ")]
    return float(line.split()[1])


def test_idle_connections_are_closed_and_capped(small_server):
    # Earlier tests' connections may still be closing: wait until this one is the only one open.
    first = connect(small_server, timeout=5)
    deadline = time.monotonic() + 5
    while open_connections_on(first) != 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # 24 connections are the cap: the next one gets 503 at once.
    idle = [first] + [connect(small_server, timeout=5) for _ in range(23)]
    extra = connect(small_server, timeout=3)
    [(status, headers, _)] = responses(extra)
    assert status == 503 and headers.get("connection") == "close"
    # Idle sockets are closed after the 1 s keep-alive timeout, which frees their threads.
    t0 = time.monotonic()
    for s in idle:
        assert s.recv(1) == b""
    assert time.monotonic() - t0 < 3
    assert small_server.get("/health").status_code == 200


def test_503_while_draining_does_not_desync():
    s = Server(MODEL, "--shutdown-timeout", "30", name="draining")
    try:
        sock = open_stream(s, {**LONG, "stream": True})  # keeps the server draining
        wait_metric(s, "splash_num_requests_running", lambda v: v == 1)
        s.proc.send_signal(signal.SIGINT)
        wait_until_503 = time.monotonic() + 5
        while s.post("/v1/completions", {"prompt": [5]}).status_code != 503:
            assert time.monotonic() < wait_until_503
            time.sleep(0.05)
        first = request_bytes("POST", "/v1/completions", SMUGGLED)
        conn = connect(s, timeout=3)
        conn.sendall(first + request_bytes("GET", "/v1/models"))
        got = responses(conn)
        assert got[0][0] == 503 and got[0][1].get("connection") == "close" and len(got) == 1, got
        sock.close()
    finally:
        assert s.stop() == 0, s.log_tail()
