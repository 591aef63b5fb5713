// Every functional primitive of cleave.
#pragma once

#include "cleave/ops/elementwise.h"
#include "cleave/ops/nn.h"
#include "cleave/ops/reduce.h"
#include "cleave/ops/shape.h"
