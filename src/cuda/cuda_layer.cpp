// The SM90 CUDA layer (world size 1): the expert engine over the caller's tokens, on the caller's
// stream, its scratch shared with the runtime's other layers and ordered across streams
// (layer_scratch.h), with no host synchronization and no allocation after creation (CUDA-graph
// capturable; a replay gives the eager bits).
#include "core/check.h"
#include "core/layer_impl.h"
#include "cuda/cuda_layers.h"
#include "cuda/errors.h"
#include "cuda/layer_scratch.h"
#include "cuda/sm90_experts.h"

namespace moe_ep::cuda {
namespace {

class CudaLayer final : public Layer::Impl {
 public:
  explicit CudaLayer(const LayerRequest& req)
      : engine_(req.desc, req.overrides, req.weights, req.runtime->device().index,
                [this, &req](size_t bytes) {
                  scratch_ = shared_layer_scratch(req.runtime.get(), req.runtime->device().index, bytes);
                  return std::shared_ptr<DeviceBuffer>(scratch_, &scratch_->buffer());
                }) {
    MOE_EP_CHECK_CODE(req.runtime->world_size() == 1, ErrorCode::kUnsupported,
                      "the CUDA layer runs with world_size 1 only over this transport; got "
                      "world_size = {}", req.runtime->world_size());
    quantize_input_ = req.desc.quantize_input;
    info.config = engine_.selected();
    info.notes = engine_.notes();
  }

  void forward(const ForwardArgs& args) override {
    int current = -1;
    MOE_EP_CUDA_CHECK(cudaGetDevice(&current));
    if (current != engine_.device_index()) MOE_EP_CUDA_CHECK(cudaSetDevice(engine_.device_index()));
    Sm90Binding b;
    b.num_tokens = quantize_input_ ? args.x.shape[0] : args.a.shape[0];
    b.x = args.x.ptr<const uint16_t>();
    b.a = args.a.ptr<const uint8_t>();
    b.a_scale = args.a_scale.ptr<const uint8_t>();
    b.a_global = args.a_global.ptr<const float>();
    b.topk_ids = args.topk_ids.data;
    b.ids_int64 = args.topk_ids.dtype == DType::kI64;
    b.topk_weights = args.topk_weights.ptr<const float>();
    b.y = args.y.ptr<uint16_t>();
    const auto stream = static_cast<cudaStream_t>(args.stream);
    const LayerScratch::Use use(*scratch_, stream);
    engine_.run(b, stream);
  }

  uint32_t read_error_flags(bool clear) override { return engine_.read_error_flags(clear); }

 private:
  std::shared_ptr<LayerScratch> scratch_;  // set while engine_ is built: declared first
  Sm90ExpertEngine engine_;
  bool quantize_input_ = true;
};

}  // namespace

std::unique_ptr<Layer::Impl> make_cuda_layer(const LayerRequest& request) {
  return std::make_unique<CudaLayer>(request);
}

}  // namespace moe_ep::cuda
