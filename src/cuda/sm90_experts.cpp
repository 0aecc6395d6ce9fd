#include "cuda/sm90_experts.h"

#include <algorithm>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "core/check.h"
#include "core/thread_pool.h"
#include "core/weight_prep.h"
#include "cuda/device_info.h"
#include "cuda/errors.h"
#include "cuda/kernels/sm90_one_token.h"
#include "cuda/kernels/sm90_quantize_route.h"
#include "cuda/kernels/sm90_shared_expert.h"
#include "cuda/weight_layout.h"
#include "cuda/weight_upload.h"

namespace moe_ep::cuda {
namespace {

// A host copy of one tensor of a pack that lives on the GPU (same shape, Device::cpu()).
struct HostCopy {
  std::vector<uint8_t> bytes;
  TensorView view;
};

HostCopy copy_to_host(const TensorView& t) {
  HostCopy c;
  c.view = t;
  if (!t.defined()) return c;
  c.view.device = Device::cpu();
  if (t.device.type != DeviceType::kCUDA) return c;
  c.bytes.resize(static_cast<size_t>(t.nbytes()));
  if (!c.bytes.empty())
    MOE_EP_CUDA_CHECK(cudaMemcpy(c.bytes.data(), t.data, c.bytes.size(), cudaMemcpyDeviceToHost));
  c.view.data = c.bytes.data();
  return c;
}

// Blocks per SM of every form of the layer's recipe that its shape and weights allow (facts'
// blocks_per_sm): a failed probe leaves the form unavailable (0 / 0), never fails the layer. The
// decode forms hold a tile's rows of A in shared memory: too much is refused by the attribute
// call (not sticky), which makes them unavailable with that reason.
void probe_forms(const LayerShape& shape, Sm90Facts& f) {
  const bool decode_shape = shape.hidden % kDecodeBlockN == 0 && (2 * shape.intermediate) % kDecodeBlockN == 0;
  if (!decode_shape)
    f.decode_unavailable = fmt::format("hidden = {} and 2 * intermediate = {} must be multiples of {}", shape.hidden,
                                       2 * shape.intermediate, kDecodeBlockN);
  for (const Sm90FormInfo& form : sm90_forms()) {
    if (form.recipe != shape.recipe || (form.folded_only && !(f.w13_folded && f.w2_folded)) ||
        (sm90_decode_family(form.family) && !decode_shape))
      continue;
    if (form.whole_layer) {  // one block of each of its two kernels on an SM together
      f.one_token_groups = one_token_groups_per_block(shape.hidden, f.sm_count);
      int fits = 0;
      if (configure_sm90_one_token(shape.hidden, shape.intermediate, shape.top_k, f.one_token_groups, &fits) !=
          cudaSuccess) {
        (void)cudaGetLastError();
        fits = 0;
      }
      f.per_sm(form.form, 0) = f.per_sm(form.form, 1) = fits;
      continue;
    }
    const Sm90FormKernels& k = sm90_form_kernels(form.form);
    int& gemm1 = f.per_sm(form.form, 0);
    int& gemm2 = f.per_sm(form.form, 1);
    if (k.configure1(static_cast<int>(shape.hidden), &gemm1) != cudaSuccess ||
        (k.configure2 != nullptr && k.configure2(static_cast<int>(shape.intermediate), &gemm2) != cudaSuccess)) {
      (void)cudaGetLastError();
      gemm1 = gemm2 = 0;
    }
  }
  const Sm90Form decode = shape.recipe == Recipe::kMxfp4 ? Sm90Form::kMxfp4Decode : Sm90Form::kNvfp4Decode;
  if (decode_shape && (f.per_sm(decode, 0) < 1 || f.per_sm(decode, 1) < 1))
    f.decode_unavailable = fmt::format("a tile's 16 rows of A (K = {} in GEMM 1, {} in GEMM 2) do not fit in "
                                       "shared memory", shape.hidden, shape.intermediate);
}

}  // namespace

Sm90ExpertEngine::Sm90ExpertEngine(const MoeDesc& desc, const KernelOverrides& overrides,
                                   const WeightPack& in, int device_index,
                                   const ScratchSource& scratch)
    : device_index_(device_index) {
  const CudaDeviceInfo dev = device_info(device_index);
  MOE_EP_CUDA_CHECK(cudaSetDevice(device_index));
  const bool mxfp4 = desc.recipe == Recipe::kMxfp4;
  const LayerShape shape{desc.fleet.num_experts, desc.fleet.hidden_size, desc.intermediate_size,
                         desc.top_k, desc.fleet.max_tokens_per_rank, desc.recipe};
  config_ = select_sm90_load_config(desc, overrides);

  // Kernel limits first: they fail before any large allocation.
  const size_t permute_smem = sm90_permute_shared_bytes(static_cast<int>(shape.num_experts));
  MOE_EP_CHECK_CODE(static_cast<int64_t>(permute_smem) <= dev.shared_per_block_optin, ErrorCode::kUnsupported,
                    "num_experts = {} needs {} bytes of shared memory in the routing kernel; cuda:{} "
                    "allows {} per block", shape.num_experts, permute_smem, device_index, dev.shared_per_block_optin);
  MOE_EP_CUDA_CHECK(configure_sm90_permute(static_cast<int>(shape.num_experts)));
  if (desc.quantize_input && config_.fuse_quantize_route.value_or(true))  // pinned on, or auto
    MOE_EP_CUDA_CHECK(mxfp4 ? configure_sm90_quantize_route(static_cast<int>(shape.num_experts))
                            : configure_sm90_nvfp4_quantize_route(static_cast<int>(shape.num_experts)));
  Sm90Facts facts;
  facts.sm_count = dev.sm_count;

  // Weights: MXFP4 as given goes to the GPU as it is (validated, analysed and converted there);
  // any other pack becomes canonical on the host first (copied there when it lives on a GPU).
  auto pool = shared_thread_pool(resolve_num_threads(overrides.num_threads));
  const ParallelFor parallel = parallel_for_of(*pool);
  {
    const ExpertShape expert_shape{shape.num_experts, shape.hidden, shape.intermediate};
    const Fp8Fold fold = config_.fold ? Fp8Fold::kWhenInside : Fp8Fold::kNever;
    DeviceKernelWeights kw;
    if (mxfp4 && in.format == WeightFormat::kMXFP4) {
      CanonicalWeights c;
      c.format = WeightFormat::kMXFP4;
      c.shape = expert_shape;
      c.w13 = in.w13.ptr<const uint8_t>();
      c.w13_scale = in.w13_scale.ptr<const uint8_t>();
      c.w2 = in.w2.ptr<const uint8_t>();
      c.w2_scale = in.w2_scale.ptr<const uint8_t>();
      c.on_device = in.w13.device.type == DeviceType::kCUDA;
      c.validate = &in;
      kw = prepare_device_weights(c, fold, parallel);
      notes_ = fmt::format("weights: {} as given", weight_format_name(WeightFormat::kMXFP4));
    } else {
      HostCopy c13 = copy_to_host(in.w13), c13s = copy_to_host(in.w13_scale), c13g = copy_to_host(in.w13_global),
               c2 = copy_to_host(in.w2), c2s = copy_to_host(in.w2_scale), c2g = copy_to_host(in.w2_global);
      const WeightPack host_pack{in.format, c13.view, c13s.view, c13g.view, c2.view, c2s.view, c2g.view, {}, {}};  // routed experts only
      const HostExpertWeights canonical = prepare_host_weights(desc.recipe, host_pack, expert_shape, parallel);
      notes_ = canonical.notes;
      kw = prepare_device_weights(canonical_view(canonical), fold, parallel);
    }
    if (mxfp4) {
      notes_ += '\n';
      notes_ += describe_fp8_window(
          *kw.window,
          "a GEMM whose rows are all inside is folded (e4m3 = e2m1 * 2^(d - 8), one fp32 column "
          "factor; overrides.fold_fp8 = false turns this off); with a row outside it keeps its E8M0 "
          "block scales, applied in fp32 at every k block (exact for any spread, slower)");
    } else {
      notes_ += "\nnvfp4 on SM90: operands decoded to f16 (e2m1 * e4m3 is exact in f16), f16 tensor "
                "cores with fp32 accumulation, global scales applied in the epilogue";
    }
    w13_tiles_ = std::move(kw.w13.tiles);
    w13_scales_ = std::move(kw.w13.scales);
    w13_global_ = std::move(kw.w13_global);
    w2_tiles_ = std::move(kw.w2.tiles);
    w2_scales_ = std::move(kw.w2.scales);
    w2_global_ = std::move(kw.w2_global);
    // Folded tensors carry shifts in place of E8M0 bytes: their column factors go along.
    w13_col_scale_ = std::move(kw.w13.col_scale);
    w2_col_scale_ = std::move(kw.w2.col_scale);
    facts.w13_folded = kw.w13.folded;
    facts.w2_folded = kw.w2.folded;
  }
  probe_forms(shape, facts);
  const Sm90Form mma = mxfp4 ? Sm90Form::kMxfp4Mma : Sm90Form::kNvfp4Mma;
  MOE_EP_CHECK_CODE(facts.per_sm(mma, 0) > 0 && facts.per_sm(mma, 1) > 0, ErrorCode::kUnsupported,
                    "the grouped GEMM kernels ({}) do not fit on cuda:{} ({})", sm90_form_name(mma), device_index,
                    dev.name);
  select_sm90_kernels(config_, desc, overrides, facts);
  LayerShape planned = shape;  // 16-bit activation buckets add h as bf16 / f16 to the workspace (plan.h)
  planned.activations_16bit = config_.uses_16bit_activations();
  planned.one_token = config_.uses_one_token_layer();
  planned.shared_intermediate = desc.shared_intermediate_size;
  plan_ = make_plan(planned);
  if (desc.shared_intermediate_size > 0) {
    MOE_EP_ASSERT(desc.quantize_input);  // validate_desc: the shared expert reads bf16 x
    shared_ = std::make_unique<Sm90SharedExpert>(shape.hidden, desc.shared_intermediate_size, desc.activation_clamp,
                                                 in.shared_w13, in.shared_w2, shape.max_tokens, device_index,
                                                 /*own_scratch=*/false);
    side_ = std::make_unique<SideStream>(device_index);
  }

  shared_scratch_ = static_cast<bool>(scratch);
  workspace_ = scratch ? scratch(plan_.workspace.total_bytes)
                     : std::make_shared<DeviceBuffer>(plan_.workspace.total_bytes);
  MOE_EP_ASSERT(workspace_ && workspace_->bytes() >= plan_.workspace.total_bytes);
  error_flags_ = DeviceBuffer(sizeof(uint32_t));
  MOE_EP_CUDA_CHECK(cudaMemset(error_flags_.get(), 0, sizeof(uint32_t)));
  const Sm90GemmWeights w13{w13_tiles_.get(), w13_scales_.get(), w13_global_.get<float>(), w13_col_scale_.get<float>()};
  const Sm90GemmWeights w2{w2_tiles_.get(), w2_scales_.get(), w2_global_.get<float>(), w2_col_scale_.get<float>()};
  pipeline_ = std::make_unique<Sm90Pipeline>(
      config_, plan_, desc.quantize_input, desc.activation_clamp.value_or(std::numeric_limits<float>::infinity()),
      w13, w2, workspace_->get<std::byte>(), error_flags_.get<uint32_t>());
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
}

void Sm90ExpertEngine::run(const Sm90Binding& b, cudaStream_t stream) const {
  if (!shared_ || b.num_tokens == 0) return pipeline_->run(b, stream);
  const WorkspaceLayout& w = plan_.workspace;
  Sm90Binding with_shared = b;
  with_shared.y_add = workspace_->get<uint16_t>(w.shared_o);
  shared_->forward(b.x, workspace_->get<uint16_t>(w.shared_o), workspace_->get<uint16_t>(w.shared_h), b.num_tokens,
                   side_->fork(stream));
  with_shared.y_add_ready = side_->join();
  pipeline_->run(with_shared, stream);
}

SelectedConfig Sm90ExpertEngine::selected() const {
  SelectedConfig out;
  config_.describe(out);
  if (shared_)
    out.add("shared_expert",
            fmt::format("bf16 {} weights, Is = {}, on a second stream beside the routed experts ({}); added to y "
                        "in the combine", shared_->tiled() ? "tiled" : "row-major", shared_->intermediate_size(),
                        shared_->uses_tensor_cores(plan_.shape.max_tokens)
                            ? fmt::format("dot products below T = {}, tensor cores from it", kSharedExpertMmaMinTokens)
                            : std::string("dot products")));
  out.add("workspace_bytes", fmt::format("{} ({:.1f} MiB, this layer's plan; max rows {}, max m-tiles {})",
                                         plan_.workspace.total_bytes, plan_.workspace.total_bytes / 1048576.0,
                                         plan_.max_rows, plan_.max_m_tiles));
  // The buffer the plan runs in: at least the plan's bytes, more when an earlier, larger layer
  // of the runtime sized the shared one.
  out.add("scratch_bytes", fmt::format("{} ({:.1f} MiB), {}", workspace_->bytes(), workspace_->bytes() / 1048576.0,
                                       shared_scratch_ ? "shared with the runtime's other layers" : "this layer's own"));
  pipeline_->describe(out);
  return out;
}

uint32_t Sm90ExpertEngine::read_error_flags(bool clear) {
  MOE_EP_CUDA_CHECK(cudaSetDevice(device_index_));
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
  uint32_t flags = 0;
  MOE_EP_CUDA_CHECK(cudaMemcpy(&flags, error_flags_.get(), sizeof(flags), cudaMemcpyDeviceToHost));
  if (clear && flags != 0) {
    MOE_EP_CUDA_CHECK(cudaMemset(error_flags_.get(), 0, sizeof(uint32_t)));
    MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
  }
  return flags;
}

}  // namespace moe_ep::cuda
