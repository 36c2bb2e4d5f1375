#ifndef BUCKETFS_CFUSE_H
#define BUCKETFS_CFUSE_H
#define FUSE_USE_VERSION 35
#include <fuse_lowlevel.h>
#endif
