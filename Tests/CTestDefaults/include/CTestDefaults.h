#ifndef BUCKETFS_CTESTDEFAULTS_H
#define BUCKETFS_CTESTDEFAULTS_H

/// How many tests the Swift test bundle runs at once, as set when the bundle was loaded
/// (docs/TESTING.md, "Time in tests").
int bucketfs_tests_parallel_width(void);

/// The empty directory HOME names for the whole run ("" if it could not be made).
const char *bucketfs_tests_home(void);

#endif
