"""The plain clients' HTTP side (Scripts/bench/list_ranges.py, Scripts/bench/list_tree.py): GETs
over one HTTP/1.1 keep-alive connection per thread, counted. A non-200 answer ends the client
with the request and the answer's start."""
import http.client
import threading
import urllib.parse

# The partial response bucketfs asks a list page for (Sources/GCSStore/GCSJSONAPI.swift): the
# plain clients ask for it too, so that their pages are bucketfs's pages.
LIST_FIELDS = ("items(bucket,name,generation,metageneration,size,timeCreated,updated,md5Hash,crc32c,"
               "cacheControl,contentDisposition,contentEncoding,contentLanguage,contentType,metadata),"
               "prefixes,nextPageToken")


class Getter:
    def __init__(self, endpoint, name):
        self.host = urllib.parse.urlsplit(endpoint).netloc
        self.name = name
        self.local = threading.local()
        self.lock = threading.Lock()
        self.requests = 0

    def get(self, path):
        if getattr(self.local, "c", None) is None:
            self.local.c = http.client.HTTPConnection(self.host, timeout=120)
        self.local.c.request("GET", path)
        r = self.local.c.getresponse()
        body = r.read()
        if r.status != 200:
            raise SystemExit(f"{self.name}: GET {path}: {r.status} {body[:200]!r}")
        with self.lock:
            self.requests += 1
        return body
