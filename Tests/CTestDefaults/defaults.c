// What the Swift test bundle sets for itself when it is loaded, before Swift Testing reads its
// environment and before any test runs (docs/TESTING.md, "Time in tests" and "The environment
// of the Swift tests"):
//
// 1. How many tests run at once. Swift Testing runs every test of the bundle at once unless
//    SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH says otherwise; hundreds of tests on a
//    two-core machine then share two threads, and a test waiting on a real socket or a real
//    deadline waited up to 20 s for its turn. The width is set to BUCKETFS_TEST_WIDTH_PER_CPU
//    tests per online CPU unless the variable is already set (so
//    `SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=1 swift test` still runs one at a time).
//
// 2. An environment of its own. No test may read what the machine happens to hold: the
//    variables that choose credentials, endpoints, trust roots and configuration directories
//    are removed, and HOME is a new empty directory (removed at exit). A test that needs one
//    of them passes it to the code under test itself (the `environment:` parameters).
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "CTestDefaults.h"

extern char **environ;

#define BUCKETFS_TEST_WIDTH_PER_CPU 4
static const char *const width_variable = "SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH";

/// Removed by name.
static const char *const removed_names[] = {
    "SSL_CERT_FILE", "SSL_CERT_DIR", "STORAGE_EMULATOR_HOST", "BUCKETFS_OAUTH_TOKEN_URL", "BUCKETFS_TOKENINFO_URL",
    "BUCKETFS_IAM_CREDENTIALS_URL", NULL,
};
/// Removed by prefix.
static const char *const removed_prefixes[] = {
    "GOOGLE_", "FIREBASE_", "CLOUDSDK_", "GCE_", "XDG_", NULL,
};

static char home[64];

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    remove(path);
    return 0;
}

static void remove_home(void) {
    if (home[0] != '\0') nftw(home, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int removed(const char *entry) {
    for (const char *const *n = removed_names; *n != NULL; n++) {
        size_t len = strlen(*n);
        if (strncmp(entry, *n, len) == 0 && entry[len] == '=') return 1;
    }
    for (const char *const *p = removed_prefixes; *p != NULL; p++) {
        if (strncmp(entry, *p, strlen(*p)) == 0) return 1;
    }
    return 0;
}

__attribute__((constructor, used)) static void bucketfs_tests_set_up(void) {
    if (getenv(width_variable) == NULL) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        if (cpus < 1) cpus = 1;
        char width[32];
        snprintf(width, sizeof width, "%ld", cpus * BUCKETFS_TEST_WIDTH_PER_CPU);
        setenv(width_variable, width, 0);
    }
    // Collect the names first: unsetenv changes environ under the loop.
    char names[64][128];
    int count = 0;
    for (char **e = environ; *e != NULL && count < 64; e++) {
        if (!removed(*e)) continue;
        const char *eq = strchr(*e, '=');
        size_t len = eq == NULL ? strlen(*e) : (size_t)(eq - *e);
        if (len >= sizeof names[0]) continue;
        memcpy(names[count], *e, len);
        names[count][len] = '\0';
        count++;
    }
    for (int i = 0; i < count; i++) unsetenv(names[i]);
    snprintf(home, sizeof home, "/tmp/bucketfs-tests-home-XXXXXX");
    if (mkdtemp(home) != NULL) {
        setenv("HOME", home, 1);
        atexit(remove_home);
    } else {
        home[0] = '\0';
    }
}

int bucketfs_tests_parallel_width(void) {
    const char *w = getenv(width_variable);
    return w == NULL ? 0 : atoi(w);
}

const char *bucketfs_tests_home(void) { return home; }
