"""A stand-in of both sides of the Cloud Storage FUSE CSI driver, written from its source
(GoogleCloudPlatform/gcs-fuse-csi-driver; docs/KUBERNETES.md says which parts), for tests that
run bucketfs as the driver runs gcsfuse:

- `NodePlugin` (pkg/csi_mounter/csi_mounter.go, pkg/util/util.go, fdchannel.go): opens /dev/fuse,
  mounts it at the pod's target with mount(2) (`fuse`, source the bucket, nodev,nosuid and
  `allow_other,default_permissions,rootmode=40000,user_id=0,group_id=0,fd=N`), listens on
  VOLUME_DIR/socket and hands one connection the JSON MountConfig `{"bucketName","options"}` with
  the descriptor as SCM_RIGHTS in the same message, then closes its own copy.
- `Sidecar` (pkg/sidecar_mounter/): connects, reads one message (5000 bytes, one descriptor),
  unlinks the socket, builds gcsfuse's argv and config file from the options as
  prepareMountArgs/prepareConfigFile do, and starts the daemon with the descriptor as fd 3,
  standard output as its log, standard error copied into VOLUME_DIR/error; stopped with SIGTERM,
  then SIGKILL 5 s later.
Paths are the test's (the real sidecar's are fixed: /gcsfuse-tmp, /gcsfuse-buffer)."""
import array
import ctypes
import json
import os
import signal
import socket
import subprocess
import threading
import time

MS_NOSUID, MS_NODEV, MS_RDONLY, MS_NOEXEC = 2, 4, 1, 8
# Kernel options the node plugin keeps (util.go allowedOptions), as mount(8) turns them into flags.
O_FLAGS = {"noexec": MS_NOEXEC, "exec": 0, "atime": 0, "noatime": 1024, "sync": 16, "async": 0, "dirsync": 128}

# The flags the sidecar drops from a volume's options (sidecar_mounter_config.go DisallowedFlags).
DISALLOWED = {"log-file", "log-format", "o", "cache-dir", "temp-dir", "config-file", "foreground", "key-file",
              "token-url", "reuse-token-from-url", "prometheus-port", "kernel-params-file", "file-system:kernel-params-file"}
# Options the sidecar consumes itself.
INTERNAL = {"token-server-identity-provider", "token-server-identity-pool", "hnw-ksa", "enable-sidecar-bucket-access-check",
            "pod-namespace", "service-account-name", "pod-name", "pod-uid", "enable-cloud-profiler-for-sidecar",
            "file-cache-medium", "gcs-fuse-numa-node", "enable-gcsfuse-kernel-params", "enable-auto-gomemlimit",
            "auto-gomemlimit-ratio", "storage-endpoint-internal"}


def _libc():
    return ctypes.CDLL(None, use_errno=True)


class NodePlugin:
    """The privileged side: mounts the pod's volume on `fd=N` and hands the descriptor over."""

    def __init__(self, bucket, target, volume_dir, options=(), fuse_path="/dev/fuse"):
        self.bucket, self.target, self.volume_dir = bucket, str(target), str(volume_dir)
        os.makedirs(self.target, exist_ok=True)
        os.makedirs(self.volume_dir, exist_ok=True)
        kernel, sidecar, flags = ["allow_other", "default_permissions", "rootmode=40000",
                                  f"user_id={os.getuid()}", f"group_id={os.getgid()}"], [], MS_NODEV | MS_NOSUID
        for o in options:
            if o in ("ro", "rw"):
                flags |= MS_RDONLY if o == "ro" else 0
            elif o.startswith("o="):
                flags |= O_FLAGS.get(o[2:], 0)
            else:
                sidecar.append(o)
        self.options = sorted(set(sidecar))
        self.fd = os.open(fuse_path, os.O_RDWR)
        kernel.append(f"fd={self.fd}")
        self.mount_data = ",".join(kernel)
        if _libc().mount(bucket.encode(), self.target.encode(), b"fuse", flags, self.mount_data.encode()) != 0:
            e = ctypes.get_errno()
            os.close(self.fd)
            raise OSError(e, f"mount {self.target}: {os.strerror(e)}")
        self.socket_path = os.path.join(self.volume_dir, "socket")
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.socket_path)
        self.listener.listen(1)
        self.handed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        try:
            conn, _ = self.listener.accept()
            msg = json.dumps({"bucketName": self.bucket, "options": self.options}).encode()
            socket.send_fds(conn, [msg], [self.fd])
            conn.close()
        finally:
            self.listener.close()
            os.close(self.fd)  # the driver closes its copy once handed over
            self.handed.set()

    def unmount(self):
        """What NodeUnpublishVolume does: unmount the target (lazily when busy)."""
        if _libc().umount2(self.target.encode(), 0) != 0:
            _libc().umount2(self.target.encode(), 2)  # MNT_DETACH


def _yaml(tree, indent=0):
    """yaml.v3's rendering of nested maps of scalars (keys sorted, 4 spaces a level)."""
    out = []
    for k in sorted(tree):
        v = tree[k]
        if isinstance(v, dict):
            out.append(" " * indent + f"{k}:")
            out.append(_yaml(v, indent + 4))
        else:
            if isinstance(v, bool):
                text = "true" if v else "false"
            elif isinstance(v, int):
                text = str(v)
            elif v == "":
                text = '""'
            else:
                text = v
            out.append(" " * indent + f"{k}: {text}")
    return "\n".join(out)


def _typed(value):
    """strconv.ParseInt, else ParseBool, else the string (prepareConfigFile)."""
    try:
        return int(value)
    except ValueError:
        pass
    if value in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if value in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    return value


class Sidecar:
    """The unprivileged side: one volume's daemon, started as sidecar_mounter starts gcsfuse."""

    def __init__(self, volume_dir, buffer_dir, gcsfuse, prometheus_port=62990, extra_config=None, run_as=None, env=None):
        self.volume_dir, self.buffer_dir, self.gcsfuse = str(volume_dir), str(buffer_dir), str(gcsfuse)
        self.prometheus_port, self.extra_config, self.run_as, self.env = prometheus_port, extra_config or {}, run_as, env
        # Mounts that stay writable when the rest is made read-only for the daemon (a container's
        # read-only root with its emptyDirs); None: the daemon sees the machine as it is.
        self.read_only_root_except = None
        self.config_file = os.path.join(self.volume_dir, "config.yaml")
        self.error_file = os.path.join(self.volume_dir, "error")
        self.proc = None

    def receive(self):
        sp = os.path.join(self.volume_dir, "socket")
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(sp)
        msg, fds, _, _ = socket.recv_fds(c, 5000, 1)
        c.close()
        os.unlink(sp)
        assert len(fds) == 1, fds
        return json.loads(msg), fds[0]

    def argv(self, config):
        """prepareMountArgs: the flags (as a map, so each once), the config file's tree, argv."""
        vol = os.path.basename(self.volume_dir)
        flags = {"app-name": "gke-gcs-fuse-csi", "temp-dir": os.path.join(self.buffer_dir, ".volumes", vol, "temp-dir"),
                 "config-file": self.config_file, "foreground": "", "uid": "0", "gid": "0",
                 "prometheus-port": str(self.prometheus_port)}
        tree = {"logging:file-path": "/dev/fd/1", "logging:format": "json", "cache-dir": ""}
        tree.update(self.extra_config)
        for o in config.get("options", []):
            if "=" not in o and ":" in o and "https" not in o:
                key, value = o.rsplit(":", 1)
                if key == "disable-metrics-for-gke":
                    if value == "true":
                        flags["prometheus-port"] = "0"
                    continue
                if key in DISALLOWED:
                    continue
                tree[key] = value
                continue
            k, _, v = o.partition("=")
            if k in DISALLOWED or k in INTERNAL:
                continue
            flags[k] = ("gke-gcs-fuse-csi-" + v) if k == "app-name" else v
        args = [f"--{k}={v}" if v != "" else f"--{k}" for k, v in flags.items()]
        return args + [config["bucketName"], "/dev/fd/3"], flags, tree

    def write_config(self, tree):
        nested = {}
        for key, value in tree.items():
            node = nested
            parts = key.split(":")
            for p in parts[:-1]:
                node = node.setdefault(p, {})
            node[parts[-1]] = _typed(value) if isinstance(value, str) else value
        if os.path.exists(self.config_file):
            os.chmod(self.config_file, 0o600)
            os.unlink(self.config_file)
        with open(self.config_file, "w") as f:
            f.write(_yaml(nested) + "\n")
        os.chmod(self.config_file, 0o400)
        if self.run_as is not None:
            os.chown(self.config_file, *self.run_as)

    def start(self, log_path):
        config, fd = self.receive()
        self.handed_at = time.monotonic()  # the descriptor is the sidecar's from here
        args, flags, tree = self.argv(config)
        self.write_config(tree)
        os.makedirs(flags["temp-dir"], exist_ok=True)
        if self.run_as is not None:
            for d in (flags["temp-dir"], os.path.dirname(flags["temp-dir"])):
                os.chown(d, *self.run_as)
        self.args = args
        self.log = open(log_path, "ab")
        err = open(self.error_file, "ab")
        # fd 3 in the daemon is the FUSE descriptor (ExtraFiles), as the driver passes it.
        wrapper = ["/bin/bash", "-c", f'exec 3<&{fd} {fd}<&- "$0" "$@"', self.gcsfuse, *args]
        if self.run_as is not None:
            uid, gid = self.run_as
            wrapper = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--inh-caps=-all",
                       "--bounding-set=-all", "--no-new-privs", "--", *wrapper]
        if self.read_only_root_except is not None:
            # A mount namespace where / and /dev/shm are read-only; the pod's own mounts (tmpfs
            # mounts of their own) stay writable.
            wrapper = ["unshare", "-m", "--propagation", "private", "/bin/sh", "-c",
                       'mount -o remount,bind,ro / && mount -o remount,bind,ro /dev/shm && exec "$@"', "sh", *wrapper]
        self.proc = subprocess.Popen(wrapper, stdin=subprocess.DEVNULL, stdout=self.log, stderr=err,
                                     pass_fds=(fd,), env=self.env)
        os.close(fd)
        err.close()
        return self.proc

    def stop(self, grace=5.0):
        """SIGTERM, then SIGKILL `grace` seconds later (the sidecar's 5 s); the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode

    def errors(self):
        try:
            return open(self.error_file).read()
        except OSError:
            return ""
