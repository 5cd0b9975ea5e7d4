#include "sluice/pipeline/spec.h"
