"""Google's retry conformance scenarios (retry_tests.json, from googleapis/conformance-tests),
played against the command line and a mount through storage-testbench's Retry Test API
(docs/TESTING.md, "The retry scenarios"; docs/SEMANTICS.md §5.7).

Every case of every scenario that names a method bucketfs sends is played: a Retry Test is made
with the case's instructions for that method (`POST /retry_test`), then one bucketfs operation that
sends the method runs through a proxy (Tests/e2e/retryproxy.py) that adds `x-retry-test-id` to its
requests. Each play checks:
- success or failure as the scenario expects: a scenario "without precondition" for a
  conditionally idempotent method is held to the rule of scenario 2 when bucketfs sent one (it
  always does: the mount and the command line send the generation they saw);
- a conditionally idempotent call sent without a precondition is not repeated;
- after a 400 or 401 the method is not sent again;
- the Retry Test's instructions were all used (`completed`);
- the object's end state: bytes, metadata, generation, presence.
The table scenario × method × case (expected, got, instructions consumed) is printed, and written
to $BUCKETFS_RETRY_TABLE when set.

Needs BUCKETFS_TESTBENCH (Scripts/testbench.sh start) and retry_tests.json
($BUCKETFS_RETRY_TESTS; default: shared/conformance/retry_tests.json in the repository's parent
directory).
"""
import json
import os
import time
import urllib.request
import uuid

import pytest

from conftest import BIN, ROOT, run, server
from retryproxy import RetryProxy

RETRY_TESTS = os.environ.get("BUCKETFS_RETRY_TESTS") or os.path.join(os.path.dirname(ROOT), "shared", "conformance", "retry_tests.json")

CONDITIONAL = {"storage.objects.insert", "storage.objects.patch", "storage.objects.delete", "storage.objects.rewrite",
               "storage.objects.copy", "storage.objects.compose", "storage.objects.update"}
SMALL = 1000
LARGE = 9 << 20      # over the 8 MiB resumable threshold: a resumable upload
READ = 1 << 20       # a read of one part (the whole object)
BIG_READ = 3 << 20   # more than a part: ranges after the first


def data(n, seed):
    import random
    return random.Random(seed).randbytes(n)


class Ctx:
    """What one play has: the proxy, the bucket's prefix, a scratch directory, the mounts."""

    def __init__(self, srv, proxy, mounts, tmp_path):
        self.srv = srv
        self.proxy = proxy
        self.mounts = mounts
        self.tmp = tmp_path
        self.prefix = f"rc-{uuid.uuid4().hex[:10]}"
        self.opts = ["--endpoint", proxy.endpoint, "--anonymous"]
        self.direct = ["--endpoint", srv.endpoint, "--anonymous"]

    def gs(self, name=""):
        return f"gs://{self.srv.bucket_name}/{self.prefix}" + (f"/{name}" if name else "")

    def seed(self, name, body, **meta):
        """An object written straight to the testbench (no Retry Test)."""
        args = ["put", "-", self.gs(name), *self.direct]
        for k, v in meta.items():
            args += ["--metadata", f"{k}={v}"]
        run(*args, input=body)
        return self.stat(name)

    def stat(self, name):
        p = run("stat", "--json", self.gs(name), *self.direct, check=False)
        return json.loads(p.stdout) if p.returncode == 0 else None

    def mount(self):
        # No hedged downloads: each scenario counts the requests its faults apply to.
        return self.mounts.mount(self.gs(), *self.opts, "--metadata-ttl", "0", "--walk-hedge", "0")

    def cli(self, *args, input=None):
        p = run(*args, *self.opts, check=False, input=input, timeout=300)
        return p.returncode == 0, p.stderr.decode(errors="replace").strip()[-200:], p.stdout


# --- the operations: (method, name, setup, action, end state) ---------------------------------
# setup(ctx) -> state, before the Retry Test applies; action(ctx, state) -> (ok, detail) while it
# applies; end(ctx, state, ok) -> a problem (str) or None, after.

def _read_setup(size):
    def setup(ctx):
        body = data(size, 1)
        ctx.seed("obj", body)
        return {"body": body}
    return setup


def cli_stat(ctx, st):
    ok, err, out = ctx.cli("stat", "--json", ctx.gs("obj"))
    return ok, err


def cli_cat(ctx, st):
    ok, err, out = ctx.cli("cat", ctx.gs("obj"))
    if ok and out != st["body"]:
        return False, f"wrong bytes ({len(out)} of {len(st['body'])})"
    return ok, err


def mount_read_setup(size):
    inner = _read_setup(size)

    def setup(ctx):
        st = inner(ctx)
        st["mnt"] = ctx.mount()
        os.stat(os.path.join(st["mnt"], "obj"))
        return st
    return setup


def mount_read(ctx, st):
    try:
        with open(os.path.join(st["mnt"], "obj"), "rb") as f:
            got = f.read()
    except OSError as e:
        return False, f"{e.__class__.__name__}: {e.strerror}"
    return (got == st["body"]), ("" if got == st["body"] else f"wrong bytes ({len(got)})")


def list_setup(ctx):
    ctx.seed("d/a", b"a")
    ctx.seed("d/b", b"b")
    return {}


def cli_ls(ctx, st):
    ok, err, out = ctx.cli("ls", ctx.gs("d"))
    if ok and not (b"a" in out and b"b" in out):
        return False, f"listing {out!r}"
    return ok, err


def mount_ls_setup(ctx):
    list_setup(ctx)
    return {"mnt": ctx.mount()}


def mount_ls(ctx, st):
    try:
        names = sorted(os.listdir(os.path.join(st["mnt"], "d")))
    except OSError as e:
        return False, f"{e.__class__.__name__}: {e.strerror}"
    return names == ["a", "b"], str(names)


def put_setup(size):
    def setup(ctx):
        path = ctx.tmp / f"src-{size}"
        body = data(size, 2)
        path.write_bytes(body)
        return {"body": body, "path": str(path)}
    return setup


def cli_put(ctx, st):
    ok, err, out = ctx.cli("put", st["path"], ctx.gs("new"))
    return ok, err


def mount_put_setup(size):
    inner = put_setup(size)

    def setup(ctx):
        st = inner(ctx)
        st["mnt"] = ctx.mount()
        return st
    return setup


def mount_put(ctx, st):
    try:
        with open(os.path.join(st["mnt"], "new"), "wb") as f:
            f.write(st["body"])
    except OSError as e:
        return False, f"{e.__class__.__name__}: {e.strerror}"
    return True, ""


def put_end(ctx, st, ok):
    info = ctx.stat("new")
    if ok:
        if info is None:
            return "succeeded, but no object"
        got = run("cat", ctx.gs("new"), *ctx.direct).stdout
        if got != st["body"]:
            return f"the object has {len(got)} other bytes"
    return None


def meta_setup(mount):
    def setup(ctx):
        info = ctx.seed("obj", b"meta", k="old")
        st = {"info": info}
        if mount:
            st["mnt"] = ctx.mount()
            os.stat(os.path.join(st["mnt"], "obj"))
        return st
    return setup


def cli_meta_set(ctx, st):
    ok, err, out = ctx.cli("meta", "set", ctx.gs("obj"), "k", "new")
    return ok, err


def mount_setxattr(ctx, st):
    try:
        os.setxattr(os.path.join(st["mnt"], "obj"), "user.k", b"new")
    except OSError as e:
        return False, f"{e.__class__.__name__}: {e.strerror}"
    return True, ""


def meta_end(ctx, st, ok):
    info = ctx.stat("obj")
    if info is None:
        return "the object is gone"
    value = (info.get("metadata") or info.get("customMetadata") or {}).get("k")
    if ok and value != "new":
        return f"succeeded, but k={value!r}"
    if str(info.get("generation")) != str(st["info"].get("generation")):
        return "the generation changed"
    return None


def rm_setup(mount):
    def setup(ctx):
        st = {"info": ctx.seed("obj", b"to delete")}
        if mount:
            st["mnt"] = ctx.mount()
            os.stat(os.path.join(st["mnt"], "obj"))
        return st
    return setup


def cli_rm(ctx, st):
    ok, err, out = ctx.cli("rm", ctx.gs("obj"))
    return ok, err


def mount_rm(ctx, st):
    try:
        os.remove(os.path.join(st["mnt"], "obj"))
    except OSError as e:
        return False, f"{e.__class__.__name__}: {e.strerror}"
    return True, ""


def rm_end(ctx, st, ok):
    there = ctx.stat("obj") is not None
    if ok and there:
        return "succeeded, but the object is there"
    if not ok and not there:
        return "failed, but the object is gone"
    return None


def mv_setup(ctx):
    body = data(SMALL, 3)
    ctx.seed("from", body)
    st = {"body": body, "mnt": ctx.mount()}
    os.stat(os.path.join(st["mnt"], "from"))
    return st


def mount_mv(ctx, st):
    try:
        os.rename(os.path.join(st["mnt"], "from"), os.path.join(st["mnt"], "to"))
    except OSError as e:
        return False, f"{e.__class__.__name__}: {e.strerror}"
    return True, ""


def mv_end(ctx, st, ok):
    src, dst = ctx.stat("from"), ctx.stat("to")
    if ok:
        if dst is None or src is not None:
            return f"succeeded, but from {'is there' if src else 'gone'}, to {'is there' if dst else 'missing'}"
        if run("cat", ctx.gs("to"), *ctx.direct).stdout != st["body"]:
            return "to has other bytes"
    elif src is None:
        return "failed, but from is gone"
    return None


# (method, operation, setup, action, end, which scenario cases: None = all, "large" = resumable only)
OPERATIONS = [
    ("storage.objects.get", "cli stat", _read_setup(SMALL), cli_stat, None),
    ("storage.objects.get", "cli cat 1 MiB", _read_setup(READ), cli_cat, None),
    ("storage.objects.get", "mount read 1 MiB", mount_read_setup(READ), mount_read, None),
    ("storage.objects.get", "mount read 3 MiB", mount_read_setup(BIG_READ), mount_read, None),
    ("storage.objects.list", "cli ls", list_setup, cli_ls, None),
    ("storage.objects.list", "mount ls", mount_ls_setup, mount_ls, None),
    ("storage.objects.insert", "cli put 1 KB", put_setup(SMALL), cli_put, put_end),
    ("storage.objects.insert", "cli put 9 MiB", put_setup(LARGE), cli_put, put_end),
    ("storage.objects.insert", "mount write 1 KB", mount_put_setup(SMALL), mount_put, put_end),
    ("storage.objects.insert", "mount write 9 MiB", mount_put_setup(LARGE), mount_put, put_end),
    ("storage.objects.patch", "cli meta set", meta_setup(False), cli_meta_set, meta_end),
    ("storage.objects.patch", "mount setxattr", meta_setup(True), mount_setxattr, meta_end),
    ("storage.objects.delete", "cli rm", rm_setup(False), cli_rm, rm_end),
    ("storage.objects.delete", "mount rm", rm_setup(True), mount_rm, rm_end),
    ("storage.objects.rewrite", "mount mv", mv_setup, mount_mv, mv_end),
]

# Methods a scenario names that bucketfs never sends (said in the table, not played).
NOT_SENT = {"storage.buckets.get", "storage.objects.copy", "storage.objects.compose", "storage.objects.update"}
# Scenario 7 (resumable uploads) is about resumable sessions: the small uploads are multipart.
RESUMABLE_ONLY = {7}
# Scenario 8 (broken downloads) is about downloads: a metadata answer is never 256 KiB long.
MEDIA_ONLY = {8}


def retry_test(endpoint, method, instructions):
    req = urllib.request.Request(f"{endpoint}/retry_test", method="POST",
                                 data=json.dumps({"instructions": {method: instructions}, "transport": "HTTP"}).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=10).read())["id"]


def retry_test_state(endpoint, test_id):
    return json.loads(urllib.request.urlopen(f"{endpoint}/retry_test/{test_id}", timeout=10).read())


def plays(scenarios):
    for sc in scenarios:
        methods = {m["name"] for m in sc["methods"]}
        for case in sc["cases"]:
            for method, name, setup, action, end in OPERATIONS:
                if method not in methods:
                    continue
                if sc["id"] in RESUMABLE_ONLY and "9 MiB" not in name:
                    continue
                if sc["id"] in MEDIA_ONLY and name == "cli stat":
                    continue
                yield sc, case["instructions"], method, name, setup, action, end


def play(ctx, sc, instructions, method, setup, action, end):
    """One case: returns the table row's fields and the problems found."""
    st = setup(ctx)
    test_id = retry_test(ctx.srv.endpoint, method, instructions)
    ctx.proxy.test_id = test_id
    started = time.monotonic()
    try:
        ok, detail = action(ctx, st)
    finally:
        ctx.proxy.test_id = None
    took = time.monotonic() - started
    calls = [c for c in ctx.proxy.calls(api=method, test_id=test_id)]
    state = retry_test_state(ctx.srv.endpoint, test_id)
    consumed = state.get("completed", False)
    # The decisions: session starts and multipart uploads for an insert (a resumable session's
    # PUTs carry no precondition of their own: the session has it).
    decisions = [c for c in calls if not (method == "storage.objects.insert" and c.verb == "PUT")]
    guarded = bool(decisions) and all(c.preconditioned for c in decisions)
    expected = sc["expectSuccess"]
    note = ""
    if sc["id"] == 3 and guarded:
        expected = True
        note = "a precondition was sent (the generation seen): scenario 2's rule"
    problems = []
    if ok != expected:
        problems.append(f"expected {'success' if expected else 'failure'}, got {'success' if ok else 'failure'} ({detail})")
    if method in CONDITIONAL and any(not c.preconditioned for c in decisions) and len(decisions) > 1:
        problems.append(f"retried without a precondition: {decisions}")
    refused = [i for i, c in enumerate(decisions) if c.status in (400, 401)]
    if refused and refused[0] != len(decisions) - 1:
        problems.append(f"sent again after a {decisions[refused[0]].status}: {decisions}")
    if not consumed:
        problems.append(f"instructions left: {state.get('instructions')}")
    if end is not None:
        p = end(ctx, st, ok)
        if p:
            problems.append(p)
    if "mnt" in st:
        ctx.mounts.unmount(st["mnt"])
    return {"expected": expected, "got": ok, "consumed": consumed, "requests": len(calls), "took": took,
            "note": note, "detail": detail}, problems


def test_retry_scenarios(tmp_path, mounts, capsys):
    if not os.path.exists(RETRY_TESTS):
        pytest.skip(f"no retry_tests.json at {RETRY_TESTS} (set BUCKETFS_RETRY_TESTS)")
    srv = server("testbench")
    scenarios = json.load(open(RETRY_TESTS))["retryTests"]
    only = os.environ.get("BUCKETFS_RETRY_ONLY")  # e.g. "8" or "3,7": these scenarios only
    if only:
        scenarios = [s for s in scenarios if str(s["id"]) in only.split(",")]
    proxy = RetryProxy(srv.hostport).start()
    rows, failures = [], []
    try:
        for sc, instructions, method, name, setup, action, end in plays(scenarios):
            ctx = Ctx(srv, proxy, mounts, tmp_path)
            row, problems = play(ctx, sc, instructions, method, setup, action, end)
            row.update(scenario=sc["id"], method=method.replace("storage.", ""), op=name, case=",".join(instructions))
            rows.append(row)
            if problems:
                failures.append(f"scenario {sc['id']} {method} [{row['case']}] {name}: " + "; ".join(problems))
    finally:
        proxy.stop()
    table = ["scenario | method | operation | case | expected | got | consumed | requests | s",
             "---|---|---|---|---|---|---|---|---"]
    for r in rows:
        table.append(f"{r['scenario']} | {r['method']} | {r['op']} | {r['case']} | "
                     f"{'success' if r['expected'] else 'failure'} | {'success' if r['got'] else 'failure'} | "
                     f"{'yes' if r['consumed'] else 'NO'} | {r['requests']} | {r['took']:.1f}"
                     + (f" ({r['note']})" if r['note'] else ""))
    named = sorted({m["name"] for sc in scenarios for m in sc["methods"]} & NOT_SENT)
    table.append("")
    table.append(f"{len(rows)} plays, {len(failures)} with problems; not sent by bucketfs: {', '.join(named)}")
    text = "\n".join(table)
    if os.environ.get("BUCKETFS_RETRY_TABLE"):
        with open(os.environ["BUCKETFS_RETRY_TABLE"], "w") as f:
            f.write(text + "\n" + "\n".join(failures) + "\n")
    with capsys.disabled():
        print("\n" + text)
    assert not failures, "\n".join(failures)
