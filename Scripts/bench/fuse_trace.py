"""The FUSE requests of one mount, from the kernel's fuse tracepoints (tracefs:
events/fuse/fuse_request_send and fuse_request_end, filtered on the mount's connection):
   fuse_trace.py TRACE FILES
-> line 1: "requests per_file between_flushes_median_ms between_flushes_mean_ms"
   then one line per opcode, most frequent first:
   "OPCODE count per_file median_ms mean_ms" (ms from the kernel sending the request to its answer).
"Between flushes": from the answer to one FLUSH to the next FLUSH sent, i.e. everything the
writer and the mount do per file outside the close's own wait (tar's calls, FUSE round trips)."""
import re
import statistics
import sys

path, files = sys.argv[1], max(int(sys.argv[2]), 1)
send_re = re.compile(r"\s(\d+\.\d+): fuse_request_send: connection \d+ req (\d+) opcode \d+ \((\w+)\)")
end_re = re.compile(r"\s(\d+\.\d+): fuse_request_end: connection \d+ req (\d+) ")
sent = {}
spans = {}
flushes = []
with open(path) as f:
    for line in f:
        m = send_re.search(line)
        if m:
            sent[m.group(2)] = (float(m.group(1)), m.group(3).removeprefix("FUSE_"))
            continue
        m = end_re.search(line)
        if m and m.group(2) in sent:
            t0, op = sent.pop(m.group(2))
            t1 = float(m.group(1))
            spans.setdefault(op, []).append((t1 - t0) * 1000)
            if op == "FLUSH":
                flushes.append((t0, t1))
total = sum(len(v) for v in spans.values())
gaps = [(flushes[i][0] - flushes[i - 1][1]) * 1000 for i in range(1, len(flushes))] or [0.0]
print(f"{total} {total / files:.2f} {statistics.median(gaps):.3f} {statistics.mean(gaps):.3f}")
for op, v in sorted(spans.items(), key=lambda kv: (-len(kv[1]), kv[0])):
    print(f"{op} {len(v)} {len(v) / files:.2f} {statistics.median(v):.3f} {statistics.mean(v):.3f}")
