"""gcp-storage-emulator for the benchmarks (Scripts/bench*.sh), with two changes that change no
answer it gives:

- in --in-memory mode it does not re-serialise its whole object table after every insert (the
  stock emulator dumps every object's JSON on each upload, so filling it with 5000 objects takes
  minutes, O(N^2)). In memory that dump is only read back at start-up.
- it serves each connection in its own thread (reads at once; changes are still made one at a
  time, under one lock), with a listen backlog of 128 instead of 5. The stock server handles one
  connection at a time: a client that reads several objects at once and stops reading one
  response while it waits for another (rclone does, with 16 files read in parallel) deadlocks
  it, and connections beyond the backlog wait for a 1 s SYN retransmission. Real Cloud Storage
  has neither limit.
Same arguments as `gcp-storage-emulator`."""
import http.server
import socketserver
import sys
import threading

from gcp_storage_emulator import server, storage
from gcp_storage_emulator.__main__ import main

_write = storage.Storage._write_config_to_file


def _write_unless_in_memory(self):
    if not self._use_memory_fs:
        _write(self)


storage.Storage._write_config_to_file = _write_unless_in_memory


class _ThreadingHTTPServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 128


_changes = threading.Lock()


def _serialised(handler):
    def run(self):
        with _changes:
            handler(self)
    return run


for _m in ("do_POST", "do_PUT", "do_PATCH", "do_DELETE"):
    setattr(server.RequestHandler, _m, _serialised(getattr(server.RequestHandler, _m)))
server.server.HTTPServer = _ThreadingHTTPServer  # the `http.server` module the emulator names

if __name__ == "__main__":
    sys.exit(main())
