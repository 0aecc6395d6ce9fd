#include "core/check.h"
#include "core/layer_impl.h"

namespace moe_ep {

std::unique_ptr<Layer::Impl> make_cpu_layer(const LayerRequest&) {
  MOE_EP_FAIL(ErrorCode::kUnsupported, "CPU layer not built yet");
}

}  // namespace moe_ep
