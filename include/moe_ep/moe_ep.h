// Umbrella header of the moe_ep public API.
#pragma once

#include "moe_ep/backend.h"
#include "moe_ep/desc.h"
#include "moe_ep/dtype.h"
#include "moe_ep/error.h"
#include "moe_ep/formats.h"
#include "moe_ep/kernel_config.h"
#include "moe_ep/layer.h"
#include "moe_ep/quant.h"
#include "moe_ep/recipe.h"
#include "moe_ep/routing_stage.h"
#include "moe_ep/runtime.h"
#include "moe_ep/tensor.h"
#include "moe_ep/weights.h"
