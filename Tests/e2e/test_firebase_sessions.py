"""A refused session says how to sign in again once: a running mount logs the whole `bucketfs
login …` line once per refusal episode, however many operations fail (each failure's own line
points to it), and again after a sign-in that worked; `whoami` prints it once, without the
mount's "picked up without a restart" note (docs/FIREBASE.md, "Sessions, logout and signing in
again")."""
import os
import time

from conftest import run
from test_firebase import API_KEY, SRC, errno_of, fb, seed, wait_for  # noqa: F401  (fb is the fixture)


def test_firebase_refused_mount_logs_the_sign_in_line_once_per_refusal(fb, mounts, tmp_path):
    seed(fb)
    fb.login_email()
    mnt = mounts.mount(f"{SRC}/{fb.home()}", "--metadata-ttl", "0.2", "--failure-ttl", "0")
    log = mounts.log_path(mnt)
    line = f"sign in again with bucketfs login {SRC} --api-key {API_KEY} --email {fb.email}"

    def said():
        return sum(1 for l in open(log).read().splitlines() if line in l)

    def refused_operations(tag, n=20):
        for i in range(n):
            rc, err = errno_of(["stat", os.path.join(mnt, f"{tag}{i}.txt")])
            assert rc != 0 and "Permission denied" in err, err

    assert os.listdir(mnt)
    fb.server.revoke(fb.uid)
    fb.server.expire(fb.uid)
    time.sleep(0.5)  # past --metadata-ttl: the listing is asked again
    refused_operations("a")
    wait_for(lambda: said() >= 1, what="the sign-in line")
    lines = open(log).read().splitlines()
    failed = [l for l in lines if "TOKEN_EXPIRED" in l and "failed" in l]
    assert failed, lines[-40:]
    # 20 refused operations, each failure line once: an identical one within the minute is not
    # logged again (docs/OPERATING.md, "Logs").
    messages = [l.split(" ", 1)[1] for l in failed]
    assert len(messages) == len(set(messages)), failed
    assert said() == 1, [l for l in lines if "sign in again" in l]
    assert all("the line to sign in again is in the log" in l for l in failed), failed[:3]

    # Signed in again (the same user): the mount goes on; refused again, the line is logged again.
    fb.login_email()
    (tmp_path / "w").write_text("after\n")
    wait_for(lambda: errno_of(["cp", str(tmp_path / "w"), os.path.join(mnt, "revived.txt")])[0] == 0,
             what="the mount to take the new login")
    assert said() == 1
    fb.server.revoke(fb.uid)
    fb.server.expire(fb.uid)
    time.sleep(0.5)
    refused_operations("b")
    assert said() == 2, [l for l in open(log).read().splitlines() if "sign in again" in l]


def test_firebase_whoami_of_a_refused_login_says_the_line_once(fb):
    fb.login_email()
    fb.server.revoke(fb.uid)
    p = run("whoami", SRC, check=False)
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 1 and "TOKEN_EXPIRED" in err, err
    assert err.count(f"bucketfs login {SRC}") == 1, err
    assert "without a restart" not in err, err
