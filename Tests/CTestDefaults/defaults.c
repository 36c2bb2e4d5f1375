// The Swift test bundle's own default for how many tests run at once (docs/TESTING.md, "How many
// tests run at once"). Swift Testing runs every test of the bundle at once unless
// SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH says otherwise; hundreds of tests on a two-core
// machine then share two threads, and a test waiting on a real socket or a real deadline can wait
// seconds for its turn. This constructor runs when the bundle is loaded, before Swift Testing
// reads its environment, and sets the width to BUCKETFS_TEST_WIDTH_PER_CPU (4) tests per online
// CPU unless the variable is already set: `SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=N swift
// test` still chooses another width.
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "CTestDefaults.h"

#define BUCKETFS_TEST_WIDTH_PER_CPU 4
static const char *const width_variable = "SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH";

__attribute__((constructor, used)) static void bucketfs_tests_set_width(void) {
    if (getenv(width_variable) != NULL) return;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1) cpus = 1;
    char width[32];
    snprintf(width, sizeof width, "%ld", cpus * BUCKETFS_TEST_WIDTH_PER_CPU);
    setenv(width_variable, width, 0);
}

int bucketfs_tests_parallel_width(void) {
    const char *w = getenv(width_variable);
    return w == NULL ? 0 : atoi(w);
}
