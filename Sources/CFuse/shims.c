#include "cfuse.h"
