"""Requests in flight on average, from the latency proxy's timing log (Tests/e2e/latencyproxy.py
--timing-log: one line per answered request, "ARRIVAL ANSWER KIND METHOD TARGET", Unix times):
   in_flight.py TIMING_LOG FROM TO
-> "small all": the media GETs that arrived between FROM and TO, in flight on average (the sum of
their durations over the time from the first one's arrival to the last one's answer): those for
the small files (targets ending /tree/sNNNN) and all of them. A GET's duration is the client's
wait: the proxy's added delay, the server's work and the body's transfer. "0.0" when there are
none."""
import re
import sys
import urllib.parse

path, t_from, t_to = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
small, every = [], []
with open(path) as f:
    for line in f:
        parts = line.split()
        if len(parts) < 5 or parts[2] != "media":
            continue
        a, b = float(parts[0]), float(parts[1])
        if a < t_from or a > t_to:
            continue
        every.append((a, b))
        if re.search(r"/tree/s\d+$", urllib.parse.unquote(parts[4].split("?")[0])):
            small.append((a, b))


def mean(spans):
    if not spans:
        return 0.0
    span = max(b for _, b in spans) - min(a for a, _ in spans)
    return sum(b - a for a, b in spans) / span if span > 0 else float(len(spans))


print(f"{mean(small):.1f} {mean(every):.1f}")
