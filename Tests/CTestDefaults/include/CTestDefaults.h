#ifndef BUCKETFS_CTESTDEFAULTS_H
#define BUCKETFS_CTESTDEFAULTS_H

/// How many tests the Swift test bundle runs at once, as set when the bundle was loaded
/// (docs/TESTING.md, "How many tests run at once").
int bucketfs_tests_parallel_width(void);

#endif
