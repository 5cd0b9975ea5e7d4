#include "sluice/ops/registry.h"
