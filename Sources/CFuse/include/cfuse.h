#ifndef BUCKETFS_CFUSE_H
#define BUCKETFS_CFUSE_H

// FUSE_USE_VERSION must be defined here, in the header Swift imports (STYLE trap 1).
// 312 (= 3.12): the multi-threaded loop takes the opaque fuse_loop_config (fuse_loop_cfg_*).
#define FUSE_USE_VERSION 312
// Through the fuse3/ prefix: the -I of cSettings does not reach Swift importers of this header.
#include <fuse3/fuse_lowlevel.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>

// Tiny shims for what Swift cannot import (function-like macros, versioned symbols) or should not
// do itself (signal handlers). Every symbol is prefixed `cfuse_`.

/// `fuse_session_new` with a hand-built `fuse_args` (FUSE_ARGS_INIT is a macro) and
/// `sizeof(struct fuse_lowlevel_ops)` as C sees it. argv[0] is the program name; argv is only read.
struct fuse_session *cfuse_session_new(int argc, char *const *argv,
                                       const struct fuse_lowlevel_ops *ops, void *userdata);

/// The multi-threaded loop (`fuse_session_loop_mt` is a versioned symbol) with a fixed signature.
/// Records the calling thread so `cfuse_wake_loop` and the signal handlers can interrupt it.
/// Returns 0, -errno, or the signal that ended it.
int cfuse_session_loop_mt(struct fuse_session *se, unsigned max_threads, unsigned max_idle_threads);

/// SIGINT/SIGTERM/SIGHUP: `fuse_session_exit(se)`, and forward the signal to the loop thread
/// (libfuse's own handlers only end the loop when the signal happens to land on that thread;
/// Swift's pool threads do not block these signals). SIGPIPE is ignored. 0 on success, -1 on error.
int cfuse_set_signal_handlers(struct fuse_session *se);
void cfuse_remove_signal_handlers(void);

/// Interrupts the thread blocked in `cfuse_session_loop_mt` (needs the signal handlers above, so
/// that the signal ends the wait instead of the process). Returns 1 if a signal was sent.
int cfuse_wake_loop(void);

/// What libfuse 3.14 cannot say to the kernel, said for it: installs custom io on the mounted
/// session that adds FUSE_PARALLEL_DIROPS to the INIT reply when the kernel offers it, and, when
/// `passthrough`, FUSE passthrough (FUSE_PASSTHROUGH, max_stack_depth), and amends the open replies
/// sent through `cfuse_reply_open_passthrough`. Call after mounting, before the loop. 0 or -errno.
/// Its state is the process's: one session per process (bucketfs mounts one). A second session
/// at once may miss the INIT amendments, and with passthrough its backing files would be
/// registered on the last installed session's device (its kernel-read opens would fail).
int cfuse_io_install(struct fuse_session *se, int passthrough);
/// The INIT reply's flags as sent (0 before INIT).
unsigned cfuse_init_reply_flags(void);
/// Whether the kernel's INIT offered passthrough; whether our reply took it (after INIT).
int cfuse_passthrough_offered(void);
int cfuse_passthrough_negotiated(void);
/// FUSE_DEV_IOC_BACKING_OPEN on the session's device: the backing id (> 0) or -errno.
int cfuse_backing_open(int fd);
/// FUSE_DEV_IOC_BACKING_CLOSE: 0 or -errno.
int cfuse_backing_close(int id);
/// `fuse_reply_open` whose reply carries FOPEN_PASSTHROUGH and `backing_id` (and FOPEN_DIRECT_IO
/// when `direct`: that handle's own reads and writes still come to the filesystem).
int cfuse_reply_open_passthrough(fuse_req_t req, const struct fuse_file_info *fi, int backing_id, int direct);

#endif
