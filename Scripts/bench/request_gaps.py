"""Where the time of a one-file-at-a-time writer goes, from the latency proxy's timing log
(Tests/e2e/latencyproxy.py --timing-log) between two marks:
   request_gaps.py TIMING_LOG FROM TO FILES
-> one line: "requests uploads in_request_s between_s per_file_ms in_request_per_file_ms
   between_per_file_ms": the seconds with a request of this client at the proxy (its round trip:
   the added delay and the server's work), and the seconds with none (the client's own work
   between an answer and its next request: for the mount, tar's calls through FUSE, staging,
   and anything it asks before the upload), over the FILES files written between FROM and TO
   (Unix times). A request that overlaps another counts once."""
import sys

path, t_from, t_to, files = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
spans = []
uploads = 0
with open(path) as f:
    for line in f:
        parts = line.split()
        if len(parts) < 5:
            continue
        a, b = float(parts[0]), float(parts[1])
        if a < t_from or a > t_to:
            continue
        spans.append((a, b))
        if "/upload/" in parts[4]:
            uploads += 1
spans.sort()
busy = 0.0
end = t_from
first = spans[0][0] if spans else t_from
last = first
for a, b in spans:
    if b <= end:
        continue
    busy += b - max(a, end)
    end = b
    last = max(last, b)
total = max(last - first, 0.0)
idle = total - busy
n = max(files, 1)
print(f"{len(spans)} {uploads} {busy:.3f} {idle:.3f} {total / n * 1000:.2f} {busy / n * 1000:.2f} {idle / n * 1000:.2f}")
