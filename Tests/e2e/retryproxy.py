"""A header-adding HTTP proxy in front of storage-testbench, for Google's retry scenarios
(Tests/e2e/test_retry_conformance.py): every request it forwards carries
`x-retry-test-id: <test_id>` (the Retry Test whose instructions apply), and it notes each request
as the JSON API method it is (`storage.objects.get`, ...) with its precondition and the answer.

    proxy = RetryProxy("127.0.0.1:9130")
    proxy.start()
    proxy.endpoint            # "http://127.0.0.1:PORT", for --endpoint
    proxy.test_id = "abc..."  # None: forwarded as is
    proxy.log                 # [Call(method, api, target, preconditioned, status), ...]
    proxy.stop()

Each request goes upstream on a connection of its own with `Connection: close`, and the answer
comes back as the upstream sends it, byte for byte and as it comes (a broken stream stays broken:
an upstream reset resets the client), with `Connection: close` and an absolute `Location` (a
resumable session) pointed at the proxy. The client opens a new connection per request.
"""
import re
import socket
import struct
import threading
from urllib.parse import urlsplit, parse_qs


def api_method(verb, target):
    """The JSON API method of a request, as the Retry Test API names it, or None."""
    path = urlsplit(target).path
    query = parse_qs(urlsplit(target).query)
    if path.startswith("/upload/storage/v1/b/") and verb in ("POST", "PUT"):
        return "storage.objects.insert"
    m = re.match(r"^/storage/v1/b/[^/]+(/o(/.*)?)?$", path)
    if not m:
        return None
    if m.group(1) is None:
        return {"GET": "storage.buckets.get", "PATCH": "storage.buckets.patch"}.get(verb)
    rest = m.group(2)
    if rest is None:
        return {"GET": "storage.objects.list", "POST": "storage.objects.insert"}.get(verb)
    if "/rewriteTo/" in rest:
        return "storage.objects.rewrite"
    if "/copyTo/" in rest:
        return "storage.objects.copy"
    if "/compose" in rest:
        return "storage.objects.compose"
    return {"GET": "storage.objects.get", "PATCH": "storage.objects.patch", "PUT": "storage.objects.update",
            "DELETE": "storage.objects.delete"}.get(verb)


class Call:
    def __init__(self, verb, target, test_id):
        self.verb = verb
        self.target = target
        self.api = api_method(verb, target)
        q = parse_qs(urlsplit(target).query)
        self.media = q.get("alt") == ["media"]
        self.preconditioned = any(k in q for k in ("ifGenerationMatch", "ifMetagenerationMatch"))
        self.test_id = test_id
        self.status = None      # the upstream's status, None when it sent none
        self.broken = False     # the upstream's answer ended without its end (reset, cut)

    def __repr__(self):
        return f"{self.verb} {self.target[:90]} -> {self.status}{' broken' if self.broken else ''}"


class RetryProxy:
    def __init__(self, upstream):
        self.upstream = upstream
        host, port = upstream.rsplit(":", 1)
        self._up = (host, int(port))
        self.test_id = None
        self.log = []
        self._lock = threading.Lock()
        self._sock = None
        self._stopped = False

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def start(self, port=0):
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        self._sock.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self):
        self._stopped = True
        try:
            self._sock.close()
        except OSError:
            pass

    def calls(self, api=None, test_id=None):
        with self._lock:
            return [c for c in self.log if (api is None or c.api == api) and (test_id is None or c.test_id == test_id)]

    def _accept(self):
        while not self._stopped:
            try:
                c, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    @staticmethod
    def _read_head(sock):
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = sock.recv(65536)
            if not d:
                return None, buf
            buf += d
            if len(buf) > 1 << 20:
                return None, buf
        head, rest = buf.split(b"\r\n\r\n", 1)
        return head.decode("latin-1").split("\r\n"), rest

    @staticmethod
    def _reset(sock):
        """Ends `sock` with a reset. Its read side is shut first: a thread blocked reading it
        would keep the socket alive past close(), and no reset would be sent."""
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.shutdown(socket.SHUT_RD)
        except OSError:
            pass
        try:
            sock.close()
        except OSError:
            pass

    def _serve(self, client):
        up = None
        try:
            lines, rest = self._read_head(client)
            if not lines:
                client.close()
                return
            verb, target, version = lines[0].split(" ", 2)
            test_id = self.test_id
            call = Call(verb, target, test_id)
            with self._lock:
                self.log.append(call)
            headers = [l for l in lines[1:] if not re.match(r"(?i)^(connection|keep-alive|x-retry-test-id):", l)]
            headers.append("Connection: close")
            if test_id:
                headers.append(f"x-retry-test-id: {test_id}")
            up = socket.create_connection(self._up, timeout=300)
            up.sendall(("\r\n".join([lines[0]] + headers) + "\r\n\r\n").encode("latin-1") + rest)
            # The request's body, as it comes, until the answer is complete.
            done = threading.Event()

            def pump_body():
                try:
                    while not done.is_set():
                        d = client.recv(65536)
                        if not d:
                            break
                        up.sendall(d)
                except OSError:
                    pass
            threading.Thread(target=pump_body, daemon=True).start()
            rlines, rrest = self._read_head(up)
            if not rlines:
                call.broken = True
                done.set()
                self._reset(client)
                return
            call.status = int(rlines[0].split(" ", 2)[1])
            out = [rlines[0]]
            length = None
            for l in rlines[1:]:
                name, _, value = l.partition(":")
                n = name.strip().lower()
                if n in ("connection", "keep-alive"):
                    continue
                if n == "content-length":
                    length = int(value.strip())
                if n == "location":
                    value = " " + value.strip().replace(f"//{self.upstream}", f"//127.0.0.1:{self._sock.getsockname()[1]}")
                    value = value.replace("//localhost:" + str(self._up[1]), f"//127.0.0.1:{self._sock.getsockname()[1]}")
                out.append(f"{name}:{value}")
            out.append("Connection: close")
            client.sendall(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + rrest)
            got = len(rrest)
            try:
                while True:
                    d = up.recv(65536)
                    if not d:
                        break
                    got += len(d)
                    client.sendall(d)
            except OSError:
                call.broken = True
            if length is not None and got < length:
                call.broken = True
            done.set()
            if call.broken:
                self._reset(client)
            else:
                try:
                    client.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                client.close()
        except Exception:
            self._reset(client)
        finally:
            if up is not None:
                try:
                    up.close()
                except OSError:
                    pass
