// The whole public API of cleave.
#pragma once

#include "cleave/autodiff/backward.h"
#include "cleave/core/device.h"
#include "cleave/core/dtype.h"
#include "cleave/core/error.h"
#include "cleave/core/shape.h"
#include "cleave/core/tensor.h"
#include "cleave/ir/attrs.h"
#include "cleave/ir/dispatch.h"
#include "cleave/ir/op_def.h"
#include "cleave/ir/registry.h"
#include "cleave/ops.h"
#include "cleave/nn/cell.h"
#include "cleave/nn/init.h"
#include "cleave/nn/layers.h"
#include "cleave/nn/loss.h"
#include "cleave/optim/optimizer.h"
