#include "cfuse.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

// What libfuse (3.14) does not say to the kernel, said for it: its INIT reply and its open replies
// are amended on their way to the kernel, through libfuse's custom-io hooks. FUSE passthrough
// (which 3.14 does not know), FUSE_DIRECT_IO_ALLOW_MMAP (nor that) and FUSE_PARALLEL_DIROPS
// (which 3.14 leaves out of its reply though FuseKit wants it). The wire layout is the kernel's
// (include/uapi/linux/fuse.h, protocol 7.40); libfuse's own header stops at 7.38.

enum {
    OP_INIT = 26,
    IN_HEADER = 40,       // struct fuse_in_header
    OUT_HEADER = 16,      // struct fuse_out_header
    INIT_EXT = 1u << 30,  // FUSE_INIT_EXT: flags2 is read
    WRITEBACK_CACHE = 1u << 16,
    PARALLEL_DIROPS = 1u << 18,
    PASSTHROUGH2 = 1u << 5,  // FUSE_PASSTHROUGH (1ULL << 37) in flags2
    DIRECT_IO_ALLOW_MMAP2 = 1u << 4,  // FUSE_DIRECT_IO_ALLOW_MMAP (1ULL << 36) in flags2
    OPEN_PASSTHROUGH = 1u << 7,  // FOPEN_PASSTHROUGH
    OPEN_DIRECT_IO = 1u << 0,    // FOPEN_DIRECT_IO
    // What the kernel allows beside FOPEN_PASSTHROUGH (FOPEN_PASSTHROUGH_MASK): FOPEN_DIRECT_IO,
    // FOPEN_NOFLUSH, FOPEN_PARALLEL_DIRECT_WRITES. Any other (FOPEN_KEEP_CACHE) fails the open.
    OPEN_PASSTHROUGH_MASK = (1u << 0) | (1u << 5) | (1u << 6) | (1u << 7),
};

struct backing_map { int32_t fd; uint32_t flags; uint64_t padding; };
#define BACKING_OPEN _IOW(229, 1, struct backing_map)
#define BACKING_CLOSE _IOW(229, 2, uint32_t)

static atomic_int wanted;           // passthrough asked for by the filesystem
static atomic_uint kernel_flags;    // the kernel's INIT flags
static atomic_uint kernel_flags2;   // and its flags2 (0 without FUSE_INIT_EXT)
static atomic_int offered;          // the kernel's INIT offered it
static atomic_int negotiated;       // our INIT reply took it
static _Atomic uint64_t init_unique;
static atomic_int session_fd = -1;
static atomic_uint reply_flags;     // the INIT reply's flags, as sent

// The open reply this thread is about to send: its backing id (0: none) and whether its own
// reads and writes still come to the filesystem (FOPEN_DIRECT_IO).
static __thread int32_t pending_backing;
static __thread int pending_direct;

static ssize_t hook_read(int fd, void *buf, size_t len, void *userdata) {
    (void)userdata;
    ssize_t n = read(fd, buf, len);
    if (n >= IN_HEADER + 16) {
        uint32_t opcode;
        memcpy(&opcode, (char *)buf + 4, 4);
        if (opcode == OP_INIT) {
            uint64_t unique;
            uint32_t minor, flags, flags2 = 0;
            memcpy(&unique, (char *)buf + 8, 8);
            memcpy(&minor, (char *)buf + IN_HEADER + 4, 4);
            memcpy(&flags, (char *)buf + IN_HEADER + 12, 4);
            if (minor >= 36 && (flags & INIT_EXT) && n >= IN_HEADER + 20) memcpy(&flags2, (char *)buf + IN_HEADER + 16, 4);
            atomic_store(&offered, (flags & INIT_EXT) && (flags2 & PASSTHROUGH2) ? 1 : 0);
            atomic_store(&kernel_flags, flags);
            atomic_store(&kernel_flags2, (flags & INIT_EXT) ? flags2 : 0);
            atomic_store(&init_unique, unique);
        }
    }
    return n;
}

// Copies the reply into `out` (at most `cap` bytes); returns its length, or -1 if it does not fit.
static ssize_t flatten(const struct iovec *iov, int count, char *out, size_t cap) {
    size_t at = 0;
    for (int i = 0; i < count; i++) {
        if (at + iov[i].iov_len > cap) return -1;
        memcpy(out + at, iov[i].iov_base, iov[i].iov_len);
        at += iov[i].iov_len;
    }
    return (ssize_t)at;
}

static ssize_t hook_writev(int fd, struct iovec *iov, int count, void *userdata) {
    (void)userdata;
    if (count >= 1 && iov[0].iov_len >= OUT_HEADER) {
        uint64_t unique;
        int32_t error;
        memcpy(&error, (char *)iov[0].iov_base + 4, 4);
        memcpy(&unique, (char *)iov[0].iov_base + 8, 8);
        uint64_t init = atomic_load(&init_unique);
        char reply[OUT_HEADER + 64];
        if (init != 0 && unique == init) {
            atomic_store(&init_unique, 0);
            ssize_t len = flatten(iov, count, reply, sizeof reply);
            if (error == 0 && len >= OUT_HEADER + 40) {
                uint32_t flags, flags2;
                memcpy(&flags, reply + OUT_HEADER + 12, 4);
                memcpy(&flags2, reply + OUT_HEADER + 32, 4);
                // Lookups and readdirs of one directory at once, as FuseKit asked (the kernel
                // serializes them per directory without it).
                flags |= atomic_load(&kernel_flags) & PARALLEL_DIROPS;
                int passthrough = atomic_load(&wanted) && atomic_load(&offered) && !(flags & WRITEBACK_CACHE);
                if (passthrough) {
                    flags |= INIT_EXT;
                    flags2 |= PASSTHROUGH2;
                    uint32_t depth = 1;  // the backing files' filesystem stacks nothing itself
                    memcpy(reply + OUT_HEADER + 36, &depth, 4);
                }
                // A shared mmap of a file open with FOPEN_DIRECT_IO (--direct-io; a reader beside
                // a direct writer) is served through the page cache, which the kernel keeps
                // coherent with the direct reads and writes (Linux 6.6); without it such an mmap
                // fails with ENODEV.
                if (atomic_load(&kernel_flags2) & DIRECT_IO_ALLOW_MMAP2) {
                    flags |= INIT_EXT;
                    flags2 |= DIRECT_IO_ALLOW_MMAP2;
                }
                memcpy(reply + OUT_HEADER + 32, &flags2, 4);
                memcpy(reply + OUT_HEADER + 12, &flags, 4);
                ssize_t w = write(fd, reply, (size_t)len);
                if (w == len && passthrough) atomic_store(&negotiated, 1);
                if (w == len) atomic_store(&reply_flags, flags);
                return w;
            }
        } else if (pending_backing > 0 && error == 0) {
            ssize_t len = flatten(iov, count, reply, sizeof reply);
            if (len == OUT_HEADER + 16) {  // struct fuse_open_out: fh, open_flags, backing_id
                uint32_t open_flags;
                memcpy(&open_flags, reply + OUT_HEADER + 8, 4);
                open_flags = (open_flags | OPEN_PASSTHROUGH) & OPEN_PASSTHROUGH_MASK;
                if (pending_direct) open_flags |= OPEN_DIRECT_IO;
                memcpy(reply + OUT_HEADER + 8, &open_flags, 4);
                memcpy(reply + OUT_HEADER + 12, &pending_backing, 4);
                return write(fd, reply, (size_t)len);
            }
        }
    }
    return writev(fd, iov, count);
}

int cfuse_io_install(struct fuse_session *se, int passthrough) {
    static const struct fuse_custom_io io = { .writev = hook_writev, .read = hook_read };
    int fd = fuse_session_fd(se);
    if (fd < 0) return -EBADF;
    atomic_store(&session_fd, fd);
    atomic_store(&wanted, passthrough ? 1 : 0);
    return fuse_session_custom_io(se, &io, fd);
}

unsigned cfuse_init_reply_flags(void) { return atomic_load(&reply_flags); }

int cfuse_passthrough_offered(void) { return atomic_load(&offered); }
int cfuse_passthrough_negotiated(void) { return atomic_load(&negotiated); }

int cfuse_backing_open(int fd) {
    struct backing_map map = { .fd = fd, .flags = 0, .padding = 0 };
    int id = ioctl(atomic_load(&session_fd), BACKING_OPEN, &map);
    return id < 0 ? -errno : id;
}

int cfuse_backing_close(int id) {
    uint32_t v = (uint32_t)id;
    return ioctl(atomic_load(&session_fd), BACKING_CLOSE, &v) < 0 ? -errno : 0;
}

int cfuse_reply_open_passthrough(fuse_req_t req, const struct fuse_file_info *fi, int backing_id, int direct) {
    pending_backing = backing_id;
    pending_direct = direct;
    int rc = fuse_reply_open(req, fi);
    pending_backing = 0;
    pending_direct = 0;
    return rc;
}
