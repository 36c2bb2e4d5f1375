"""What a gs:// user is told when a credential fails (docs/CREDENTIALS.md, "When a token endpoint
fails", "When a credential is refused", "whoami"), against the stand-ins of Google's token
endpoints (fake_google_auth.py) in front of the project's Cloud Storage test server:
- a token endpoint that does not answer is named with the setting that chose it, not storage's;
- `whoami` exits non-zero when the bucket did not answer or no token came;
- a refusal says why at the default log level (no credentials found; a static token);
- GOOGLE_CLOUD_QUOTA_PROJECT reaches the server over the file's quota_project_id;
- a key file others can read is warned of; a directory as --key-file is named as one;
- the mount's log names the metadata server's account as whoami does;
- a signed-out mount shows in `bucketfs status` and as `bucketfs_signed_out` (docs/OPERATING.md)."""
import os
import re
import socket
import subprocess
import time
import urllib.request

import pytest

from conftest import BIN, ROOT, run
from test_credentials import BUCKET, env_for, fake, service_account, user, whoami, write  # noqa: F401 (fake: the fixture)


def dead_url():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


def test_an_unreachable_token_endpoint_is_named_and_whoami_fails(fake, tmp_path):
    path = write(tmp_path, "adc.json", user(fake))
    os.chmod(path, 0o600)
    down = dead_url() + "/token"
    code, out, err = whoami(fake, "--key-file", path, env=env_for(fake, BUCKETFS_OAUTH_TOKEN_URL=down), check=False)
    assert code == 1, (code, out, err)
    assert f"cannot get an access token: the OAuth token endpoint {down}" in out, out
    assert "set by BUCKETFS_OAUTH_TOKEN_URL" in out and "STORAGE_EMULATOR_HOST" not in out + err, out + err
    # A bucket that does not answer fails whoami too; one that answers passes.
    code, out, _ = whoami(fake, "--key-file", path, "--endpoint", dead_url(), check=False)
    assert code == 1 and "bucket: cannot reach" in out, out
    code, out, _ = whoami(fake, "--key-file", path)
    assert code == 0 and "bucket: answered" in out, out


def test_a_refusal_says_why_at_the_default_level(fake, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = env_for(fake, HOME=str(home))
    p = run("ls", f"gs://{BUCKET}", "--endpoint", fake.url, env=env, check=False)
    err = p.stderr.decode()
    assert p.returncode != 0 and "Invalid Credentials" in err, err
    assert "no Google credentials found" in err and "no credentials were sent" in err, err
    p = run("ls", f"gs://{BUCKET}", "--endpoint", fake.url, "--token", "stale", env=env, check=False)
    assert p.returncode != 0 and "never refreshed" in p.stderr.decode(), p.stderr
    # With a tokeninfo endpoint to ask, the refusal says what it answered.
    env["BUCKETFS_TOKENINFO_URL"] = fake.url + "/tokeninfo"
    p = run("ls", f"gs://{BUCKET}", "--endpoint", fake.url, "--token", "stale", env=env, check=False)
    assert "the static token: not valid now" in p.stderr.decode(), p.stderr


def test_quota_project_from_the_environment_and_file_checks(fake, tmp_path):
    obj = service_account(fake)
    obj["quota_project_id"] = "file-p"
    path = write(tmp_path, "sa.json", obj)
    os.chmod(path, 0o644)
    _, out, err = whoami(fake, "--key-file", path, env=env_for(fake, GOOGLE_CLOUD_QUOTA_PROJECT="env-p"))
    assert "quota project: env-p (GOOGLE_CLOUD_QUOTA_PROJECT)" in out, out
    rec = fake.storage_records()[-1]
    assert ("x-goog-user-project", "env-p") in [(k.lower(), v) for k, v in rec["headers"]]
    assert f"can be read by other users (mode 644)" in err and f"chmod 600 {path}" in err, err
    os.chmod(path, 0o600)
    _, _, err = whoami(fake, "--key-file", path)
    assert "can be read by other users" not in err, err
    code, out, err = whoami(fake, "--key-file", str(tmp_path), check=False)
    assert code != 0 and f"{tmp_path} is a directory, not a credential file" in err and "NSCocoaErrorDomain" not in err, err


def test_the_mount_log_names_the_metadata_servers_account(fake, mounts, monkeypatch):
    for k in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_OAUTH_ACCESS_TOKEN", "STORAGE_EMULATOR_HOST", "CLOUDSDK_CONFIG"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", "/nonexistent")
    monkeypatch.setenv("GCE_METADATA_HOST", f"127.0.0.1:{fake.port}")
    mnt = mounts.mount(f"gs://{BUCKET}", "--endpoint", fake.url)
    log = open(mounts.log_path(mnt)).read()
    mounts.unmount(mnt)
    assert "credentials: gce-default@p.iam.gserviceaccount.com (metadata server" in log, log[:3000]


def test_a_signed_out_mount_shows_in_status_and_metrics(fake, tmp_path, mounts, monkeypatch):
    """A mount whose sign-in is revoked: once its last token has expired every operation fails
    (EACCES), `bucketfs status` says "signed out" with the server's words and what to run, and
    exits 1; `bucketfs_signed_out` is 1. A healthy running mount is "running", exit 0."""
    fake.lifetime = 2
    for k in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_OAUTH_ACCESS_TOKEN", "STORAGE_EMULATOR_HOST", "CLOUDSDK_CONFIG", "GCE_METADATA_HOST"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("BUCKETFS_OAUTH_TOKEN_URL", fake.url + "/token")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the registry status reads: the test's own
    path = write(tmp_path, "adc.json", user(fake))
    os.chmod(path, 0o600)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    src = f"gs://{BUCKET}"
    mnt = mounts.mount(src, "--endpoint", fake.url, "--key-file", path, "--metrics-address", f"127.0.0.1:{port}")
    st = subprocess.run([BIN, "status", src], capture_output=True, text=True, timeout=30)
    assert st.returncode == 0 and f"running: mounted at {mnt}" in st.stdout and "wait for it" not in st.stdout, st
    fake.refresh_tokens = set()
    time.sleep(fake.lifetime + 0.2)
    with pytest.raises(PermissionError):
        os.listdir(mnt)  # never listed yet: a request, refused
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    st = subprocess.run([BIN, "status", src], capture_output=True, text=True, timeout=30)
    mounts.unmount(mnt)
    assert re.search(r"^bucketfs_signed_out 1(\.0)?$", metrics, re.M), metrics
    doc = open(os.path.join(ROOT, "docs", "OPERATING.md")).read()
    rules = doc[doc.index("<!-- checked by Tests/e2e/test_alerts.py: alert rules -->"):].split("```", 2)[1]
    assert re.search(r"- alert: BucketfsSignedOut.*\n\s+expr: max by \(instance\) \(bucketfs_signed_out\) > 0", rules), rules
    assert st.returncode == 1, st
    assert "signed out: mounted at" in st.stdout and "invalid_grant" in st.stdout, st.stdout
    assert "gcloud auth application-default login" in st.stdout.splitlines()[-1], st.stdout
