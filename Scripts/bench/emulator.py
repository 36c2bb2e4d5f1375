"""gcp-storage-emulator for Scripts/bench.sh, with one change: in --in-memory mode it does not
re-serialise its whole object table after every insert (the stock emulator dumps every object's
JSON on each upload, so filling it with 5000 objects takes minutes, O(N^2)). In memory that dump
is only read back at start-up, so skipping it changes no answer the emulator gives.
Same arguments as `gcp-storage-emulator`."""
import sys

from gcp_storage_emulator import storage
from gcp_storage_emulator.__main__ import main

_write = storage.Storage._write_config_to_file


def _write_unless_in_memory(self):
    if not self._use_memory_fs:
        _write(self)


storage.Storage._write_config_to_file = _write_unless_in_memory

if __name__ == "__main__":
    sys.exit(main())
