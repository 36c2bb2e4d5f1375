#include "cfuse.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

// FuseKit converts these through fixed-width Swift integers.
_Static_assert(sizeof(fuse_ino_t) == 8, "fuse_ino_t is 64-bit");
_Static_assert(sizeof(off_t) == 8, "off_t is 64-bit");
_Static_assert(sizeof(((struct fuse_file_info *)0)->fh) == 8, "fh is 64-bit");

struct fuse_session *cfuse_session_new(int argc, char *const *argv,
                                       const struct fuse_lowlevel_ops *ops, void *userdata) {
    struct fuse_args args = { .argc = argc, .argv = (char **)argv, .allocated = 0 };
    struct fuse_session *se = fuse_session_new(&args, ops, sizeof(*ops), userdata);
    // Option parsing may have replaced args with an allocated copy; our argv is never freed.
    fuse_opt_free_args(&args);
    return se;
}

static _Atomic(struct fuse_session *) signal_session;
static pthread_t loop_thread;
static atomic_int loop_running;
static atomic_int handlers_installed;
static volatile sig_atomic_t exit_signal;  // the signal that ended the loop; 0 none, -1 cfuse_wake_loop

// A process may start with these blocked (e.g. spawned from a thread that blocks them): the loop
// thread must receive them, or a SIGTERM stays pending forever.
static void unblock_exit_signals(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

int cfuse_session_loop_mt(struct fuse_session *se, unsigned max_threads, unsigned max_idle_threads) {
    struct fuse_loop_config *config = fuse_loop_cfg_create();
    if (config == NULL) return -ENOMEM;
    if (atomic_load(&handlers_installed)) unblock_exit_signals();
    fuse_loop_cfg_set_max_threads(config, max_threads);
    fuse_loop_cfg_set_idle_threads(config, max_idle_threads);
    loop_thread = pthread_self();
    atomic_store(&loop_running, 1);
    int res = fuse_session_loop_mt(se, config);
    atomic_store(&loop_running, 0);
    fuse_loop_cfg_destroy(config);
    return res == 0 && exit_signal > 0 ? exit_signal : res;
}

static void cfuse_exit_handler(int sig) {
    int saved = errno;
    struct fuse_session *se = atomic_load(&signal_session);
    if (se != NULL) fuse_session_exit(se);
    if (exit_signal == 0) exit_signal = sig;
    // The loop thread sleeps in sem_wait; only a signal delivered to it ends the wait (EINTR).
    if (atomic_load(&loop_running) && !pthread_equal(pthread_self(), loop_thread))
        pthread_kill(loop_thread, sig);
    errno = saved;
}

static int set_handler(int sig, void (*handler)(int)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: the loop thread's wait must be interrupted
    return sigaction(sig, &sa, NULL);
}

int cfuse_set_signal_handlers(struct fuse_session *se) {
    exit_signal = 0;
    atomic_store(&signal_session, se);
    if (set_handler(SIGINT, cfuse_exit_handler) == -1 || set_handler(SIGTERM, cfuse_exit_handler) == -1 ||
        set_handler(SIGHUP, cfuse_exit_handler) == -1 || set_handler(SIGPIPE, SIG_IGN) == -1)
        return -1;
    atomic_store(&handlers_installed, 1);
    unblock_exit_signals();
    return 0;
}

void cfuse_remove_signal_handlers(void) {
    if (!atomic_exchange(&handlers_installed, 0)) return;
    set_handler(SIGINT, SIG_DFL);
    set_handler(SIGTERM, SIG_DFL);
    set_handler(SIGHUP, SIG_DFL);
    set_handler(SIGPIPE, SIG_DFL);
    atomic_store(&signal_session, NULL);
}

int cfuse_wake_loop(void) {
    if (!atomic_load(&handlers_installed) || !atomic_load(&loop_running)) return 0;
    if (exit_signal == 0) exit_signal = -1;  // not a real SIGHUP: run() reports 0
    return pthread_kill(loop_thread, SIGHUP) == 0;
}
