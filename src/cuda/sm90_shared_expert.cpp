#include "cuda/sm90_shared_expert.h"

#include <cmath>
#include <limits>

#include "core/check.h"
#include "cuda/device_buffer.h"
#include "cuda/errors.h"
#include "cuda/kernels/sm90_shared_expert.h"
#include "moe_ep/desc.h"

namespace moe_ep::cuda {
namespace {

void check_matrix(const TensorView& t, const char* name, int64_t rows, int64_t cols, const char* dims,
                  int device_index) {
  const Device here = Device::cuda(device_index);
  MOE_EP_CHECK(t.defined() && t.dtype == DType::kBF16 && t.ndim == 2 && t.shape[0] == rows &&
                   t.shape[1] == cols && t.is_contiguous() &&
                   (t.device.type == DeviceType::kCPU || t.device == here) && t.data != nullptr,
               "{} is {} {} on {}; expected contiguous bf16 {} = [{}, {}] in host memory or on {}", name,
               t.defined() ? dtype_name(t.dtype) : "missing", t.shape_str(), t.device.str(), dims,
               rows, cols, here.str());
}

}  // namespace

struct Sm90SharedExpert::Buffers {
  DeviceBuffer w13, w2, h;
};

Sm90SharedExpert::Sm90SharedExpert(int64_t H, int64_t I, std::optional<float> clamp, const TensorView& w13,
                                   const TensorView& w2, int64_t max_tokens, int device_index,
                                   bool own_scratch, Layout layout)
    : H_(H), I_(I), max_tokens_(max_tokens), device_index_(device_index), buf_(std::make_unique<Buffers>()) {
  MOE_EP_CHECK(H >= 16 && H % 16 == 0 && H <= (1 << 20),
               "shared expert hidden_size = {} is invalid; expected a multiple of 16 in [16, 2^20]", H);
  MOE_EP_CHECK(I >= 16 && I % 16 == 0 && I <= (1 << 20),
               "shared expert intermediate_size = {} is invalid; expected a multiple of 16 in [16, 2^20]", I);
  MOE_EP_CHECK(max_tokens >= 1 && max_tokens <= 65535 * 4,
               "shared expert max_tokens = {} is invalid; expected 1..{}", max_tokens, 65535 * 4);
  check_activation_clamp(clamp, "shared expert activation_clamp");
  clamp_ = clamp.value_or(std::numeric_limits<float>::infinity());
  check_matrix(w13, "shared w13", 2 * I, H, "[2I, H]", device_index);
  check_matrix(w2, "shared w2", H, I, "[H, I]", device_index);
  MOE_EP_CHECK(layout != Layout::kTiled || shared_expert_tiles(H, I),
               "shared expert tiled weights need hidden_size and intermediate_size multiples of 256 and "
               "2 * H * I < 2^31; got H = {}, I = {}", H, I);
  tiled_ = layout == Layout::kTiled ||
           (layout == Layout::kAuto && kSharedExpertTiledByDefault && shared_expert_tiles(H, I));
  MOE_EP_CUDA_CHECK(cudaSetDevice(device_index_));
  MOE_EP_CUDA_CHECK(configure_sm90_shared_expert_mma());
  buf_->w13 = DeviceBuffer(static_cast<size_t>(w13.nbytes()));
  buf_->w2 = DeviceBuffer(static_cast<size_t>(w2.nbytes()));
  if (own_scratch) buf_->h = DeviceBuffer(static_cast<size_t>(max_tokens * I * 2));
  // Tiled: each matrix goes to the device as given, then into its layout there.
  auto upload = [&](const TensorView& w, DeviceBuffer& to, int64_t rows, int64_t k, int64_t intermediate) {
    DeviceBuffer row_major = tiled_ ? DeviceBuffer(to.bytes()) : DeviceBuffer();
    DeviceBuffer& first = tiled_ ? row_major : to;
    MOE_EP_CUDA_CHECK(cudaMemcpy(first.get(), w.data, to.bytes(), cudaMemcpyDefault));
    if (tiled_) {
      MOE_EP_CUDA_CHECK(launch_sm90_shared_expert_tile_weights(row_major.get<uint16_t>(), to.get<uint16_t>(), rows, k,
                                                               intermediate, nullptr));
      MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());  // before row_major is freed
    }
  };
  upload(w13, buf_->w13, 2 * I, H, I);
  upload(w2, buf_->w2, H, I, 0);
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
}

Sm90SharedExpert::~Sm90SharedExpert() = default;

void Sm90SharedExpert::forward(const uint16_t* x, uint16_t* out, int64_t T, void* stream) const {
  run(x, out, buf_->h.get<uint16_t>(), T, false, stream);
}

void Sm90SharedExpert::add_to(const uint16_t* x, uint16_t* y, int64_t T, void* stream) const {
  run(x, y, buf_->h.get<uint16_t>(), T, true, stream);
}

void Sm90SharedExpert::forward(const uint16_t* x, uint16_t* out, uint16_t* h, int64_t T, void* stream) const {
  run(x, out, h, T, false, stream);
}

void Sm90SharedExpert::set_way(Way way) {
  MOE_EP_CHECK(way != Way::kTensorCores || (H_ % kSharedExpertMmaHiddenMultiple == 0 &&
                                            I_ % kSharedExpertMmaIntermediateMultiple == 0),
               "shared expert tensor-core kernels need hidden_size % {} == 0 and intermediate_size % {} == 0; "
               "got H = {}, I = {}", kSharedExpertMmaHiddenMultiple, kSharedExpertMmaIntermediateMultiple, H_, I_);
  way_ = way;
}

bool Sm90SharedExpert::uses_tensor_cores(int64_t T) const { return shared_expert_uses_tensor_cores(params(T)); }

SharedExpertParams Sm90SharedExpert::params(int64_t T) const {
  SharedExpertParams p;
  p.num_tokens = static_cast<int32_t>(T);
  p.hidden = static_cast<int32_t>(H_);
  p.intermediate = static_cast<int32_t>(I_);
  p.clamp = clamp_;
  p.tiled_weights = tiled_ ? 1 : 0;
  p.bulk_weights = T <= kSharedExpertBulkMaxTokens ? 1 : 0;  // the weights are cudaMalloc'd (aligned)
  p.path = way_ == Way::kDotProducts   ? SharedExpertPath::kDotProducts
           : way_ == Way::kTensorCores ? SharedExpertPath::kTensorCores
                                       : SharedExpertPath::kAuto;
  return p;
}

void Sm90SharedExpert::run(const uint16_t* x, uint16_t* y, uint16_t* h, int64_t T, bool accumulate,
                           void* stream) const {
  MOE_EP_CHECK(T >= 0 && T <= max_tokens_, "shared expert num_tokens = {} is invalid; expected 0..max_tokens = {}",
               T, max_tokens_);
  MOE_EP_CHECK(T == 0 || (x != nullptr && y != nullptr), "shared expert x / y is a null pointer");
  MOE_EP_CHECK(T == 0 || h != nullptr, "shared expert h scratch is a null pointer (built without its own "
               "scratch: pass the caller's h)");
  SharedExpertParams p = params(T);
  p.x = x;
  p.w13 = buf_->w13.get<uint16_t>();
  p.w2 = buf_->w2.get<uint16_t>();
  p.h = h;
  p.y = y;
  p.accumulate = accumulate ? 1 : 0;
  MOE_EP_CUDA_CHECK(launch_sm90_shared_expert(p, static_cast<cudaStream_t>(stream)));
}

namespace {

class Sm90StandaloneSharedExpert final : public SharedExpert::Impl {
 public:
  explicit Sm90StandaloneSharedExpert(const SharedExpertRequest& r)
      : expert_(r.hidden_size, r.intermediate_size, r.activation_clamp, r.w13, r.w2, r.max_tokens,
                r.device.index) {}

  void run(const TensorView& x, const TensorView& y, bool accumulate, void* stream) const override {
    int current = -1;
    MOE_EP_CUDA_CHECK(cudaGetDevice(&current));
    const int device = y.device.index;
    if (current != device) MOE_EP_CUDA_CHECK(cudaSetDevice(device));
    const int64_t T = x.shape[0];
    const auto* xp = x.ptr<const uint16_t>();
    auto* yp = y.ptr<uint16_t>();
    if (accumulate)
      expert_.add_to(xp, yp, T, stream);
    else
      expert_.forward(xp, yp, T, stream);
  }

  std::string kernels(int64_t num_tokens) const override {
    return expert_.uses_tensor_cores(num_tokens) ? "tensor cores" : "dot products";
  }

 private:
  Sm90SharedExpert expert_;
};

}  // namespace

std::unique_ptr<SharedExpert::Impl> make_sm90_shared_expert(const SharedExpertRequest& request) {
  return std::make_unique<Sm90StandaloneSharedExpert>(request);
}

}  // namespace moe_ep::cuda
