"""Listing a directory by name ranges through a real mount (docs/SEMANTICS.md §6), and the formula
server the listing bench runs against (formula_server.py), checked against fake-gcs-server.

- The formula server answers the official client as fake-gcs-server does for the same 2,500
  objects uploaded there: the same names, prefixes, sizes, hashes and metadata, page by page,
  with offsets, delimiter and small pages.
- A mount lists a directory of 2,500 objects on fake-gcs-server (which pages for real) and one of
  20,000 on the formula server, with small pages so that many ranges are used: the names are
  exactly those the official client lists, and the metrics show ranges were used and honoured.
- gcp-storage-emulator (which ignores the offsets, and maxResults too): the listing is exact, in
  one page, with no range asked for.
"""
import concurrent.futures
import os
import re
import subprocess
import threading
import urllib.request

import pytest

from conftest import server, sh
from formula_server import Formula, parse_fields, serve

METRICS_PORT = int(os.environ.get("LISTING_METRICS_PORT", "9149"))


def client_for(endpoint):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage
    return storage.Client(project="test", client_options={"api_endpoint": endpoint},
                          credentials=AnonymousCredentials())


@pytest.fixture
def formula_server():
    """Starts a formula server on a free port; yields a function (families) -> (endpoint, bucket)."""
    servers = []

    def start(families, bucket="formula"):
        srv = serve(Formula(families, bucket), 0)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}", bucket

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def upload(bucket, formula, at_once=16):
    """Uploads every object of `formula` to `bucket` (the official client, `at_once` at a time)."""
    def put(obj):
        name, data, meta = obj
        b = bucket.blob(name)
        b.metadata = meta
        b.upload_from_string(data, content_type="application/octet-stream")
    with concurrent.futures.ThreadPoolExecutor(at_once) as pool:
        list(pool.map(put, formula.objects()))


def pages(client, bucket, **kw):
    """Every page of a listing: [(items as (name, size, md5, crc32c, metadata), prefixes)]."""
    it = client.list_blobs(bucket, **kw)
    out = []
    for page in it.pages:
        items = [(b.name, b.size, b.md5_hash, b.crc32c, b.metadata) for b in page]
        out.append((items, sorted(page.prefixes)))
    return out


def flat(ps):
    return [i for items, _ in ps for i in items], sorted({p for _, prefixes in ps for p in prefixes})


@pytest.fixture(scope="module")
def fake_gcs_tree():
    """2,500 objects (2,000 entries, every 4th a subdirectory of 2) uploaded to fake-gcs-server once."""
    srv = server("fake-gcs")
    prefix = f"listing-{os.getpid()}/"
    formula = Formula([prefix + "cmp/:2000:4:2"], srv.bucket_name)
    upload(srv.bucket(), formula)
    return srv, prefix, formula


def test_formula_server_answers_as_fake_gcs_server(fake_gcs_tree, formula_server):
    srv, prefix, formula = fake_gcs_tree
    endpoint, _ = formula_server([prefix + "cmp/:2000:4:2"], srv.bucket_name)
    fake, ours = srv.client(), client_for(endpoint)
    d = prefix + "cmp/"
    queries = [
        dict(prefix=d, delimiter="/"),
        dict(prefix=d, delimiter="/", page_size=7),
        dict(prefix=d),  # every object, no delimiter
        dict(prefix=d, delimiter="/", start_offset=d + "f0000400/x001", end_offset=d + "f0001201"),
        dict(prefix=d, start_offset=d + "f0000400/x001", end_offset=d + "f0000404/x001", page_size=3),
        dict(prefix=d + "f0000008/", delimiter="/"),
        dict(prefix=prefix, delimiter="/"),
    ]
    for q in queries:
        want, got = pages(fake, srv.bucket_name, **q), pages(ours, srv.bucket_name, **q)
        assert flat(got) == flat(want), q
        assert len(flat(got)[0]) + len(flat(got)[1]) > 0, q
        if "page_size" in q and "delimiter" not in q:
            # The same pages: fake-gcs-server pages for real, so does the formula server (with a
            # delimiter it counts items only, where Cloud Storage and the formula count prefixes too).
            assert [len(items) + len(p) for items, p in got] == [len(items) + len(p) for items, p in want], q
    # Media: the same bytes, also for a range.
    name = d + "f0000005"
    assert ours.bucket(srv.bucket_name).blob(name).download_as_bytes() == \
        fake.bucket(srv.bucket_name).blob(name).download_as_bytes()
    assert ours.bucket(srv.bucket_name).blob(name).download_as_bytes(start=3, end=9) == \
        fake.bucket(srv.bucket_name).blob(name).download_as_bytes(start=3, end=9)


def test_formula_server_answers_a_partial_response():
    """`fields` selects what a list page holds, as Cloud Storage's partial responses do: the
    selected keys of each item (the same values), the selected top-level keys, nothing else; every
    key selected is the whole page, byte for byte; no `fields`, whole resources."""
    import json
    f = Formula(["p/:3000", "m/:30:3:2"], "b")
    q = {"prefix": "p/", "delimiter": "/", "maxResults": "1000", "startOffset": "p/f0001500"}
    whole = json.loads(f.list(q, "http://h"))
    keys = {"bucket", "name", "generation", "size", "updated", "md5Hash", "crc32c", "metadata"}
    part = json.loads(f.list(dict(q, fields="items(" + ",".join(sorted(keys)) + "),nextPageToken"), "http://h"))
    assert set(part) == {"items", "nextPageToken"} and part["nextPageToken"] == whole["nextPageToken"]
    assert part["items"] == [{k: v for k, v in o.items() if k in keys} for o in whole["items"]]
    everything = "kind,items(" + ",".join(Formula.KEYS) + "),prefixes,nextPageToken"
    assert f.list(dict(q, fields=everything), "http://h") == f.list(q, "http://h")
    # A whole page's items are the resources objects.get answers (one formula, two renderings).
    assert whole["items"] == [f.resource(*f.find(o["name"]), "http://h") for o in whole["items"]]
    m = json.loads(f.list({"prefix": "m/", "delimiter": "/", "fields": "prefixes,items/name"}, "http://h"))
    assert set(m) == {"items", "prefixes"} and all(set(o) == {"name"} for o in m["items"]) and m["prefixes"]
    assert parse_fields("items(a,b/c),d") == ({"items", "d"}, {"items": {"a", "b"}, "d": None})
    assert parse_fields("") == (None, {})


def test_the_plain_clients_ask_for_bucketfs_fields():
    """The benches' plain clients ask a list page for what bucketfs asks for (their pages are
    bucketfs's pages): Scripts/bench/plain_http.py against Sources/GCSStore/GCSJSONAPI.swift."""
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    swift = open(os.path.join(root, "Sources/GCSStore/GCSJSONAPI.swift")).read()
    m = re.search(r'static let objectFields = ((?:"[^"]*"\s*\+?\s*)+)', swift)
    object_fields = "".join(re.findall(r'"([^"]*)"', m.group(1)))
    assert re.search(r'static let listFields = "items\(\\\(objectFields\)\),prefixes,nextPageToken"', swift)
    text = open(os.path.join(root, "Scripts/bench/plain_http.py")).read()
    m = re.search(r"LIST_FIELDS = \(((?:\s*\"[^\"]*\")+)\)", text)
    assert "".join(re.findall(r'"([^"]*)"', m.group(1))) == f"items({object_fields}),prefixes,nextPageToken"


def names_listed(client, bucket, d):
    """What the official client lists in directory `d`, as the mount shows it (file and
    subdirectory names)."""
    it = client.list_blobs(bucket, prefix=d, delimiter="/")
    files = [b.name[len(d):] for b in it if b.name != d]
    dirs = [p[len(d):-1] for p in it.prefixes]
    return sorted(files + dirs, key=lambda s: s.encode())


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r'^(bucketfs_list_[a-z_]+)(\{[^}]*\})? ([0-9.e+]+)$', line)
        if m:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def ls_mount(mounts, source, endpoint, d, *options):
    mnt = mounts.mount(source, "--endpoint", endpoint, "--anonymous", "--read-only",
                       "--metrics-address", f"127.0.0.1:{METRICS_PORT}", *options)
    try:
        p = sh(["ls", "-1f", f"{mnt}/{d}"])
        shown = sorted((n for n in p.stdout.decode().split("\n") if n and n not in (".", "..")), key=lambda s: s.encode())
        # ls -l stats every entry: the sizes come from the listing.
        sh(["ls", "-l", f"{mnt}/{d}"])
        return shown, scrape(METRICS_PORT)
    finally:
        mounts.unmount(mnt)


def test_a_mount_lists_a_fake_gcs_directory_by_ranges(fake_gcs_tree, mounts):
    srv, prefix, _ = fake_gcs_tree
    d = prefix + "cmp"
    want = names_listed(srv.client(), srv.bucket_name, d + "/")
    assert len(want) == 2000
    shown, m = ls_mount(mounts, srv.src(), srv.endpoint, d, "--list-page-size", "100", "--list-concurrency", "8")
    assert shown == want
    assert m["bucketfs_list_ranges_honoured"] == 1
    assert m['bucketfs_list_pages_total{by="range"}'] >= 15, m
    assert m["bucketfs_list_ranges_total"] > 1, m


def test_a_mount_lists_a_formula_directory_by_many_ranges(formula_server, mounts):
    endpoint, bucket = formula_server(["big/:20000:7:3", "small/:10"])
    want = names_listed(client_for(endpoint), bucket, "big/")
    assert len(want) == 20000
    shown, m = ls_mount(mounts, f"gs://{bucket}", endpoint, "big", "--list-page-size", "50", "--list-concurrency", "16")
    assert shown == want
    assert m["bucketfs_list_ranges_honoured"] == 1
    assert m['bucketfs_list_pages_total{by="range"}'] >= 400, m
    assert m["bucketfs_list_range_cuts_total"] >= 1, m


def test_the_emulator_lists_exactly_in_one_page(mounts):
    srv = server("emulator")
    d = f"listing-emu-{os.getpid()}"
    formula = Formula([d + "/:600:5:2"], srv.bucket_name)
    # 4 at a time: the emulator serves one request at a time and queues 5 connections; 16 at once
    # overflowed its queue, and under load (TEST_LOAD=2) a dropped connect's retransmissions
    # outlasted the client's 60 s connect timeout. It is no slower: one at a time either way.
    upload(srv.bucket(), formula, at_once=4)
    want = names_listed(srv.client(), srv.bucket_name, d + "/")
    shown, m = ls_mount(mounts, srv.src(), srv.endpoint, d, "--list-page-size", "50", "--list-concurrency", "8")
    assert shown == want
    # It ignores maxResults as well as the offsets: the whole directory comes in the first page,
    # so no range is asked for (and none can show the offsets ignored).
    assert srv.has("no-list-offsets")
    assert m['bucketfs_list_pages_total{by="range"}'] == 0, m
    assert m['bucketfs_list_pages_total{by="token"}'] >= 1, m
