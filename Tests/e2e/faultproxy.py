"""A small fault-injecting HTTP proxy for the fault tests, run in-process.

    proxy = FaultProxy("127.0.0.1:9323")      # the upstream (gcp-storage-emulator)
    proxy.start()
    proxy.endpoint                             # "http://127.0.0.1:PORT", for `--endpoint`
    rule = proxy.add_rule(method="GET", query_re="alt=media", action="stall_after_headers", times=1)
    ...
    rule.fired                                 # how often the rule acted
    proxy.log                                  # [Entry(method, target, result, t, rule), ...]
    proxy.release()                            # ends every held (stalled) response
    proxy.stop()

The client side is HTTP/1.1 with keep-alive (async-http-client); the upstream, the emulator, is
single-threaded HTTP/1.0, so every forwarded request gets its own upstream connection
(`Connection: close`) and the whole upstream response is read before anything is sent on, which
keeps a stalled client from ever blocking the emulator. Responses are passed on faithfully (status,
reason, headers, body) with HTTP/1.1 framing: `Content-Length` of the body actually sent,
keep-alive unless the client asked otherwise. Absolute `Location` headers that point at the
upstream (resumable upload sessions) are rewritten to point at the proxy.

Rules are tried in order; the first that matches and still has `times` left acts, the others are
not consulted. A request no rule takes is forwarded as it is. Actions (parameters in brackets):

- `stall_after_headers`: upstream's status and headers, then nothing; the socket is held open until
  `release()`/`stop()` or until the client closes it.
- `stall_mid_body` [bytes=65536]: headers and the first `bytes` of the body, then held likewise.
- `short_body_no_cl` [bytes=65536]: no Content-Length, `Connection: close`, only `bytes` of the body,
  then a clean close (legal HTTP/1.1 framing by close: the client cannot tell it was cut).
- `reset_mid_body` [bytes=65536]: headers and `bytes` of the body, then RST (SO_LINGER 0).
- `wrong_content_length` [content_length=int or callable(len) -> int, bytes=None]: Content-Length
  replaced; the body is sent cut to `bytes` if given, else cut to the new length if that is
  shorter, else whole; then the connection is closed.
- `empty_body`: upstream's status and headers, body replaced by nothing (`Content-Length: 0`).
- `status` [status=503, headers={}, body=None, message=None]: answered by the proxy itself with a
  JSON API error body; the upstream never sees the request.
- `lose_response`: the request is forwarded (it takes effect), then the client connection is closed
  without any response.
- `reset`: the request is read (its whole body) and the connection reset (RST, SO_LINGER 0) with no
  answer; nothing is forwarded, so the request has no effect upstream.
- `hang`: a server that takes the request and never answers: nothing is forwarded (the request
  has no effect upstream) and nothing is sent; the socket is held open like a stall.
- `delay` [seconds=1]: waits, then forwards normally.
- `forward`: forwards normally (a rule that only counts or shields later rules).

A bandwidth limit, `FaultProxy(upstream, rate=BYTES_PER_SECOND)` (or `proxy.rate = ...` at any
time; None: no limit), makes the proxy a slow link: everything it reads from its clients (requests
and their bodies, the upload direction) passes at most `rate` bytes a second, all connections
together, and so does everything it sends them (the download direction, a budget of its own). The
client sockets' receive buffers are kept small then, so a client's sending slows at once, as on a
slow link, instead of filling megabytes of kernel buffers first.

A per-connection limit, `FaultProxy(upstream, conn_rate=BYTES_PER_SECOND)`, caps each client
connection on its own, each way (beside the shared `rate`, if any): one TCP stream over a long
round trip, or one request to Cloud Storage, carries only so much, and a client fills a link of
such streams only with several requests at once.
"""
import collections
import json
import re
import select
import socket
import struct
import threading
import time

ACTIONS = {"stall_after_headers", "stall_mid_body", "short_body_no_cl", "reset_mid_body", "reset",
           "wrong_content_length", "empty_body", "status", "lose_response", "hang", "delay", "forward"}

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}

REASONS = {200: "OK", 204: "No Content", 206: "Partial Content", 308: "Resume Incomplete",
           400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           408: "Request Timeout", 412: "Precondition Failed", 416: "Requested Range Not Satisfiable",
           429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway",
           503: "Service Unavailable", 504: "Gateway Timeout"}

Entry = collections.namedtuple("Entry", "method target result t rule")
Entry.__doc__ = """One request: method, path+query, the status sent (int) or the action's name (str),
time.time() when the request had been read, and the index of the rule that acted (or None)."""


class Rule:
    def __init__(self, index, method, path_re, query_re, headers, body_re, action, times, skip, params):
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}; one of {sorted(ACTIONS)}")
        self.index = index
        self.method = method.upper() if method else None
        self.path_re = re.compile(path_re, re.I) if path_re else None
        self.query_re = re.compile(query_re, re.I) if query_re else None
        self.headers = {k.lower(): re.compile(v, re.I) for k, v in (headers or {}).items()}
        self.body_re = re.compile(body_re if isinstance(body_re, bytes) else body_re.encode(), re.S) if body_re else None
        self.action = action
        self.times = times
        self.skip = skip
        self.params = params
        self.matched = 0   # matching requests seen (skipped ones included)
        self.fired = 0     # times the action was applied

    def matches(self, req):
        if self.method and req.method != self.method:
            return False
        if self.path_re and not self.path_re.search(req.path):
            return False
        if self.query_re and not self.query_re.search(req.query):
            return False
        for k, rx in self.headers.items():
            if not rx.search(req.header(k) or ""):
                return False
        if self.body_re and not self.body_re.search(req.body):
            return False
        return True

    def __repr__(self):
        return f"Rule#{self.index}({self.action}, fired={self.fired}, times={self.times})"


def _header(headers, name):
    """The first value of header `name` (case-insensitive) in [(name, value)], or None."""
    name = name.lower()
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


class Request:
    def __init__(self, method, target, version, headers, body):
        self.method = method
        self.target = target
        self.version = version
        self.headers = headers  # [(name, value)] as received
        self.body = body
        self.path, _, self.query = target.partition("?")

    def header(self, name):
        return _header(self.headers, name)


class Response:
    def __init__(self, status, reason, headers, body):
        self.status = status
        self.reason = reason
        self.headers = headers  # [(name, value)]
        self.body = body

    def header(self, name):
        return _header(self.headers, name)


class _Closed(Exception):
    pass


class Throttle:
    """One direction of a link of `rate` bytes a second, shared by every connection: each piece
    waits for its turn (its slot of len/rate seconds after the pieces before it). A piece whose
    thread woke late may use up to `SLACK` seconds of the link's unused time, so a loaded machine's
    late wake-ups do not slow the link; an idle link saves no more than that. `rate` may change
    at any time; None lets everything through at once."""

    SLACK = 0.05

    def __init__(self, rate=None, stopped=None):
        self.rate = rate
        self._next = time.monotonic()
        self._lock = threading.Lock()
        self._stopped = stopped or threading.Event()

    def piece(self):
        """How much to move at once: about 1/50 s of the link, 1 KiB to 64 KiB."""
        return 1 << 16 if not self.rate else max(1024, min(1 << 16, int(self.rate / 50)))

    def take(self, n):
        rate = self.rate
        if not rate or n <= 0:
            return
        with self._lock:
            now = time.monotonic()
            start = max(self._next, now - self.SLACK)
            self._next = start + n / rate
            wait = self._next - now
        if wait > 0:
            self._stopped.wait(wait)


class _Throttles:
    """Several limits at once (the link's shared one and the connection's own): a piece is the
    smallest of theirs and waits for its turn in each."""

    def __init__(self, *throttles):
        self.throttles = [t for t in throttles if t is not None]

    @property
    def rate(self):
        rates = [t.rate for t in self.throttles if t.rate]
        return min(rates) if rates else None

    def piece(self):
        return min([t.piece() for t in self.throttles if t.rate] or [1 << 16])

    def take(self, n):
        for t in self.throttles:
            t.take(n)


class _Conn:
    """Buffered reading from a socket (through `throttle`, if given)."""

    def __init__(self, sock, throttle=None):
        self.sock = sock
        self.buf = b""
        self.throttle = throttle

    def _recv(self):
        t = self.throttle
        d = self.sock.recv(t.piece() if t and t.rate else 1 << 16)
        if not d:
            raise _Closed()
        if t:
            t.take(len(d))
        return d

    def _fill(self):
        self.buf += self._recv()

    def readline(self, limit=1 << 16):
        while b"\r\n" not in self.buf:
            if len(self.buf) > limit:
                raise _Closed()
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def read(self, n):
        parts, have = [self.buf], len(self.buf)
        while have < n:  # gathered in a list: appending to one bytes object is quadratic
            d = self._recv()
            parts.append(d)
            have += len(d)
        data = b"".join(parts)
        if have == n:
            self.buf = b""
            return data
        d, self.buf = data[:n], data[n:]
        return d

    def read_to_eof(self):
        try:
            while True:
                self._fill()
        except (_Closed, ConnectionError):
            pass
        d, self.buf = self.buf, b""
        return d

    def headers(self):
        out = []
        while True:
            line = self.readline()
            if not line:
                return out
            k, _, v = line.decode("latin-1").partition(":")
            out.append((k.strip(), v.strip()))

    def chunked(self):
        body = b""
        while True:
            size = int(self.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.readline():  # trailers
                    pass
                return body
            body += self.read(size)
            self.read(2)


def _get(headers, name):
    name = name.lower()
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


class FaultProxy:
    def __init__(self, upstream, upstream_timeout=120, rate=None, conn_rate=None):
        """`upstream` is "host:port" (or "http://host:port") of the real server; `rate`, bytes a
        second each way between the proxy and its clients (None: no limit); `conn_rate`, bytes a
        second each way for each client connection on its own (None: no limit)."""
        self.conn_rate = conn_rate
        # The connection's own limits, for the thread serving it (`_serve`).
        self._own = threading.local()
        upstream = upstream.split("://", 1)[-1].rstrip("/")
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))
        self.upstream_origin = f"http://{host}:{port}"
        self.upstream_timeout = upstream_timeout
        self.rules = []
        self.log = []
        # called as on_request(request, result) for every request handled (result as in the log)
        self.on_request = None
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._stopped = threading.Event()
        self._up = Throttle(rate, self._stopped)
        self._down = Throttle(rate, self._stopped)
        self._clients = set()
        self._threads = []
        self._listener = None
        self.port = None

    # --- API ---------------------------------------------------------------------------------

    @property
    def rate(self):
        """The link's bytes a second each way (None: no limit)."""
        return self._up.rate

    @rate.setter
    def rate(self, value):
        self._up.rate = value
        self._down.rate = value

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self, port=0):
        """Listens on 127.0.0.1:`port` (0: a free port, see `.port`) and serves in threads."""
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(64)
        self._listener = s
        self.port = s.getsockname()[1]
        t = threading.Thread(target=self._accept_loop, name=f"faultproxy-{self.port}", daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def add_rule(self, method=None, path_re=None, query_re=None, action="forward", times=None, skip=0,
                 req_headers=None, body_re=None, **params):
        """Adds a rule (tried after the ones already there) and returns it. `times`: how often it
        may act (None: always); `skip`: how many matching requests it lets through first;
        `req_headers`: {name: regex} the request headers must match; `body_re`: a regex (bytes or str)
        the request body must match."""
        with self._lock:
            r = Rule(len(self.rules), method, path_re, query_re, req_headers, body_re, action, times, skip, params)
            self.rules.append(r)
            return r

    def clear(self):
        """Drops every rule (held responses stay held until `release()`)."""
        with self._lock:
            self.rules = []

    def release(self):
        """Ends every response held by a stall so far (their sockets are closed)."""
        with self._lock:
            ev, self._release = self._release, threading.Event()
        ev.set()

    def reset_clients(self):
        """Resets (RST) every client connection open now, as a link that drops does; returns how many."""
        with self._lock:
            clients = list(self._clients)
        for c in clients:
            try:
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return len(clients)

    def stop(self):
        self._stopped.set()
        self.release()
        try:
            self._listener.close()
        except OSError:
            pass
        with self._lock:
            clients = list(self._clients)
        for c in clients:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                c.close()
            except OSError:
                pass
        for t in self._threads:
            t.join(timeout=2)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def entries(self, method=None, path_re=None, query_re=None):
        """The log entries of requests matching these filters."""
        p = re.compile(path_re, re.I) if path_re else None
        q = re.compile(query_re, re.I) if query_re else None
        out = []
        for e in list(self.log):
            path, _, query = e.target.partition("?")
            if method and e.method != method.upper():
                continue
            if p and not p.search(path):
                continue
            if q and not q.search(query):
                continue
            out.append(e)
        return out

    def wait_fired(self, rule, count=1, timeout=10):
        """Waits until `rule` has acted `count` times; returns whether it did."""
        end = time.time() + timeout
        while time.time() < end:
            if rule.fired >= count:
                return True
            time.sleep(0.02)
        return rule.fired >= count

    # --- server ------------------------------------------------------------------------------

    def _accept_loop(self):
        self._listener.settimeout(0.2)  # a close() does not wake accept(): poll for stop()
        while not self._stopped.is_set():
            try:
                c, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            c.settimeout(None)
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.rate or self.conn_rate:
                c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
                c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 16)
            with self._lock:
                self._clients.add(c)
            t = threading.Thread(target=self._serve, args=(c,), daemon=True)
            t.start()
            self._threads = [x for x in self._threads if x.is_alive()] + [t]

    def _serve(self, c):
        own_up = Throttle(self.conn_rate, self._stopped) if self.conn_rate else None
        self._own.down = Throttle(self.conn_rate, self._stopped) if self.conn_rate else None
        conn = _Conn(c, _Throttles(self._up, own_up) if own_up else self._up)
        try:
            while not self._stopped.is_set():
                req = self._read_request(conn)
                if req is None:
                    return
                keep = self._handle(c, req)
                if not keep:
                    return
        except (_Closed, ConnectionError, OSError, ValueError):
            return
        finally:
            with self._lock:
                self._clients.discard(c)
            try:
                c.close()
            except OSError:
                pass

    def _read_request(self, conn):
        try:
            line = conn.readline()
            while not line:  # tolerate stray CRLF between requests
                line = conn.readline()
        except (_Closed, ConnectionError, OSError):
            return None
        parts = line.decode("latin-1").split(" ")
        if len(parts) != 3:
            raise ValueError(f"bad request line {line!r}")
        method, target, version = parts
        headers = conn.headers()
        if (_get(headers, "Expect") or "").lower() == "100-continue":
            self._sendall(conn.sock, b"HTTP/1.1 100 Continue\r\n\r\n")
        if "chunked" in (_get(headers, "Transfer-Encoding") or "").lower():
            body = conn.chunked()
            headers = [(k, v) for k, v in headers if k.lower() != "transfer-encoding"]
            headers.append(("Content-Length", str(len(body))))
        else:
            body = conn.read(int(_get(headers, "Content-Length") or 0))
        return Request(method.upper(), target, version, headers, body)

    def _pick(self, req):
        with self._lock:
            for r in self.rules:
                if not r.matches(req):
                    continue
                if r.times is not None and r.fired >= r.times:
                    continue
                r.matched += 1
                if r.matched <= r.skip:
                    continue
                r.fired += 1
                return r
        return None

    def _record(self, req, result, t, rule):
        self.log.append(Entry(req.method, req.target, result, t, rule.index if rule else None))
        if self.on_request:
            self.on_request(req, result)

    def _client_keep_alive(self, req):
        conn = (req.header("Connection") or "").lower()
        if req.version.upper() == "HTTP/1.0":
            return "keep-alive" in conn
        return "close" not in conn

    def _handle(self, c, req):
        t = time.time()
        rule = self._pick(req)
        action = rule.action if rule else "forward"
        p = rule.params if rule else {}
        keep = self._client_keep_alive(req)

        if action == "status":
            status = int(p.get("status", 503))
            body = p.get("body")
            if body is None:
                msg = p.get("message") or f"injected {status} by the fault proxy"
                body = json.dumps({"error": {"code": status, "message": msg,
                                             "errors": [{"message": msg, "domain": "global", "reason": "injected"}]}})
            if isinstance(body, str):
                body = body.encode()
            headers = [("Content-Type", "application/json; charset=UTF-8")] + list((p.get("headers") or {}).items())
            self._record(req, status, t, rule)  # before the answer: a client that has it finds it recorded
            self._send(c, Response(status, REASONS.get(status, "Error"), headers, body), keep, req)
            return keep

        if action == "reset":
            self._record(req, "reset", t, rule)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close()
            return False

        if action == "hang":
            self._record(req, "hang", t, rule)
            self._hold(c)
            return False

        if action == "delay":
            self._wait(float(p.get("seconds", 1)))

        try:
            resp = self._forward(req)
        except Exception as e:  # upstream trouble: tell the client like a gateway would
            body = json.dumps({"error": {"code": 502, "message": f"fault proxy: upstream failed: {e}"}}).encode()
            self._record(req, 502, t, rule)
            self._send(c, Response(502, "Bad Gateway", [("Content-Type", "application/json")], body), keep, req)
            return keep

        if action in ("forward", "delay"):
            self._record(req, resp.status, t, rule)
            self._send(c, resp, keep, req)
            return keep

        self._record(req, action, t, rule)
        n = int(p.get("bytes", 65536))
        if action == "lose_response":
            return False
        if action == "empty_body":
            resp.body = b""
            self._send(c, resp, keep, req)
            return keep
        if action == "stall_after_headers":
            self._sendall(c, self._head(resp, keep, len(resp.body)))
            self._hold(c)
            return False
        if action == "stall_mid_body":
            self._sendall(c, self._head(resp, keep, len(resp.body)) + resp.body[:n])
            self._hold(c)
            return False
        if action == "short_body_no_cl":
            self._sendall(c, self._head(resp, False, None) + resp.body[:n])
            self._close_cleanly(c)
            return False
        if action == "reset_mid_body":
            self._sendall(c, self._head(resp, keep, len(resp.body)) + resp.body[:n])
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close()
            return False
        if action == "wrong_content_length":
            cl = p.get("content_length", lambda size: size // 2)
            cl = cl(len(resp.body)) if callable(cl) else int(cl)
            cut = p.get("bytes")
            body = resp.body[:int(cut)] if cut is not None else resp.body[:min(cl, len(resp.body))]
            self._sendall(c, self._head(resp, keep, cl) + body)
            self._close_cleanly(c)
            return False
        raise AssertionError(action)

    # --- helpers -----------------------------------------------------------------------------

    def _wait(self, seconds):
        self._stopped.wait(seconds)

    def _sendall(self, c, data):
        """Sends `data` to a client through the link's download direction."""
        own = getattr(self._own, "down", None)
        down = _Throttles(self._down, own) if own else self._down
        if not down.rate:
            c.sendall(data)
            return
        view = memoryview(data)
        while len(view):
            n = down.piece()
            down.take(min(n, len(view)))
            c.sendall(view[:n])
            view = view[n:]

    def _hold(self, c):
        """Keeps the socket open, sending nothing, until released, stopped or closed by the client."""
        ev = self._release
        while not ev.is_set() and not self._stopped.is_set():
            try:
                r, _, _ = select.select([c], [], [], 0.2)
            except (OSError, ValueError):
                return
            if r:
                try:
                    if not c.recv(1 << 16):
                        return  # the client gave up
                except OSError:
                    return

    @staticmethod
    def _close_cleanly(c):
        try:
            c.shutdown(socket.SHUT_WR)
            # let the client read everything before the socket goes away
            c.settimeout(2)
            while c.recv(1 << 16):
                pass
        except OSError:
            pass

    def _head(self, resp, keep, content_length):
        lines = [f"HTTP/1.1 {resp.status} {resp.reason}"]
        for k, v in resp.headers:
            kl = k.lower()
            if kl in HOP_BY_HOP or kl == "content-length":
                continue
            if kl == "location" and v.startswith(self.upstream_origin):
                v = self.endpoint + v[len(self.upstream_origin):]
            lines.append(f"{k}: {v}")
        if content_length is not None:
            lines.append(f"Content-Length: {content_length}")
        lines.append("Connection: keep-alive" if keep else "Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _send(self, c, resp, keep, req):
        no_body = req.method == "HEAD" or resp.status in (204, 304) or 100 <= resp.status < 200
        if req.method == "HEAD":
            head = self._head(resp, keep, None)
            cl = resp.header("Content-Length")
            if cl is not None:
                head = head[:-2] + f"Content-Length: {cl}\r\n\r\n".encode()
            self._sendall(c, head)
        else:
            self._sendall(c, self._head(resp, keep, None if no_body else len(resp.body)) + (b"" if no_body else resp.body))

    def _forward(self, req):
        u, conn, status, reason, headers = self._upstream(req)
        try:
            return Response(status, reason, headers, self._upstream_body(conn, req, status, headers))
        finally:
            u.close()

    def _upstream(self, req):
        """Sends `req` upstream on a new connection (`Connection: close`) and reads the status line
        and headers. Returns (socket, _Conn, status, reason, headers); the body is still to be read
        from the _Conn (see `_upstream_body`) and the caller closes the socket."""
        u = socket.create_connection(self.upstream, timeout=self.upstream_timeout)
        try:
            lines = [f"{req.method} {req.target} HTTP/1.1"]
            for k, v in req.headers:
                if k.lower() in HOP_BY_HOP or k.lower() == "content-length":
                    continue
                lines.append(f"{k}: {v}")
            if req.body or req.method in ("POST", "PUT", "PATCH"):
                lines.append(f"Content-Length: {len(req.body)}")
            lines.append("Connection: close")
            u.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + req.body)
            conn = _Conn(u)
            while True:
                status_line = conn.readline().decode("latin-1")
                version, _, rest = status_line.partition(" ")
                code, _, reason = rest.partition(" ")
                status = int(code)
                headers = conn.headers()
                if status >= 200 or status == 101:
                    break
            return u, conn, status, reason or REASONS.get(status, ""), headers
        except BaseException:
            u.close()
            raise

    @staticmethod
    def _upstream_body(conn, req, status, headers):
        """The whole body of an upstream response whose head `_upstream` has read."""
        if req.method == "HEAD" or status in (204, 304):
            return b""
        if "chunked" in (_get(headers, "Transfer-Encoding") or "").lower():
            return conn.chunked()
        if _get(headers, "Content-Length") is not None:
            return conn.read(int(_get(headers, "Content-Length")))
        return conn.read_to_eof()
