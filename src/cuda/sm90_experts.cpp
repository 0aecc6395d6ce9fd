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

// Blocks per SM of a kernel form's two GEMM kernels (configure1 / configure2: int* -> cudaError_t):
// a failed probe leaves that form unavailable (0 / 0), never fails the layer.
template <class Configure1, class Configure2>
void probe_gemm_pair(Configure1 configure1, Configure2 configure2, int (&blocks_per_sm)[2]) {
  if (configure1(&blocks_per_sm[0]) != cudaSuccess || configure2(&blocks_per_sm[1]) != cudaSuccess) {
    (void)cudaGetLastError();
    blocks_per_sm[0] = blocks_per_sm[1] = 0;
  }
}

// The same for a decode form, whose kernels are configured for their K (hidden in GEMM 1,
// intermediate in GEMM 2).
void probe_decode_pair(cudaError_t (*configure1)(int, int*), cudaError_t (*configure2)(int, int*),
                       const LayerShape& shape, int (&blocks_per_sm)[2]) {
  probe_gemm_pair([&](int* b) { return configure1(static_cast<int>(shape.hidden), b); },
                  [&](int* b) { return configure2(static_cast<int>(shape.intermediate), b); }, blocks_per_sm);
}

// The decode GEMMs (of the layer's recipe) need n a multiple of kDecodeBlockN and 16 rows of A
// in shared memory.
void probe_decode(const LayerShape& shape, Sm90Facts& f) {
  if (shape.hidden % kDecodeBlockN != 0 || (2 * shape.intermediate) % kDecodeBlockN != 0) {
    f.decode_unavailable = fmt::format("hidden = {} and 2 * intermediate = {} must be multiples of {}",
                                       shape.hidden, 2 * shape.intermediate, kDecodeBlockN);
    return;
  }
  // Too much shared memory (the tile's 16 rows of A) is refused by the attribute call: the decode
  // kernels are then unavailable, not an error (the failed call is not sticky).
  const bool mxfp4 = shape.recipe == Recipe::kMxfp4;
  const auto gemm1 = mxfp4 ? &configure_sm90_mxfp4_decode_gemm1 : &configure_sm90_nvfp4_decode_gemm1;
  const auto gemm2 = mxfp4 ? &configure_sm90_mxfp4_decode_gemm2 : &configure_sm90_nvfp4_decode_gemm2;
  const bool ok = gemm1(static_cast<int>(shape.hidden), &f.decode_blocks_per_sm[0]) == cudaSuccess &&
                  gemm2(static_cast<int>(shape.intermediate), &f.decode_blocks_per_sm[1]) == cudaSuccess;
  if (!ok) (void)cudaGetLastError();
  if (!ok || f.decode_blocks_per_sm[0] < 1 || f.decode_blocks_per_sm[1] < 1) {
    f.decode_unavailable = fmt::format("a tile's 16 rows of A (K = {} in GEMM 1, {} in GEMM 2) do not fit in "
                                       "shared memory", shape.hidden, shape.intermediate);
    return;
  }
  // The deep form (overrides.decode_prefetch) and K split in two (overrides.decode_split_k; auto
  // at T = 1): a failed probe leaves the form unavailable.
  probe_decode_pair(mxfp4 ? &configure_sm90_mxfp4_decode_deep_gemm1 : &configure_sm90_nvfp4_decode_deep_gemm1,
                    mxfp4 ? &configure_sm90_mxfp4_decode_deep_gemm2 : &configure_sm90_nvfp4_decode_deep_gemm2, shape,
                    f.decode_deep_blocks_per_sm);
  probe_decode_pair(mxfp4 ? &configure_sm90_mxfp4_decode_split_gemm1 : &configure_sm90_nvfp4_decode_split_gemm1,
                    mxfp4 ? &configure_sm90_mxfp4_decode_split_gemm2 : &configure_sm90_nvfp4_decode_split_gemm2, shape,
                    f.decode_split_blocks_per_sm);
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
  if (mxfp4) {
    MOE_EP_CUDA_CHECK(configure_sm90_mxfp4_grouped_gemm1(&facts.mma_blocks_per_sm[0]));
    MOE_EP_CUDA_CHECK(configure_sm90_mxfp4_grouped_gemm2(&facts.mma_blocks_per_sm[1]));
  } else {
    MOE_EP_CUDA_CHECK(configure_sm90_nvfp4_grouped_gemm1(&facts.mma_blocks_per_sm[0]));
    MOE_EP_CUDA_CHECK(configure_sm90_nvfp4_grouped_gemm2(&facts.mma_blocks_per_sm[1]));
  }
  MOE_EP_CHECK_CODE(facts.mma_blocks_per_sm[0] > 0 && facts.mma_blocks_per_sm[1] > 0, ErrorCode::kUnsupported,
                    "the grouped GEMM kernels do not fit on cuda:{} ({})", device_index, dev.name);

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
  probe_decode(shape, facts);
  if (mxfp4) {
    if (facts.w13_folded && facts.w2_folded) {
      MOE_EP_CUDA_CHECK(configure_sm90_mxfp4_wgmma_grouped_gemm1(config_.wgmma_tile, &facts.wgmma_blocks_per_sm[0]));
      MOE_EP_CUDA_CHECK(configure_sm90_mxfp4_wgmma_grouped_gemm2(config_.wgmma_tile, &facts.wgmma_blocks_per_sm[1]));
      probe_gemm_pair(&configure_sm90_mxfp4_rs_grouped_gemm1, &configure_sm90_mxfp4_rs_grouped_gemm2,
                      facts.wgmma_bf16_blocks_per_sm);
      probe_gemm_pair(&configure_sm90_mxfp4_rs_wide_grouped_gemm1, &configure_sm90_mxfp4_rs_wide_grouped_gemm2,
                      facts.wgmma_bf16_wide_blocks_per_sm);
      if (configure_sm90_mxfp4_rs_wide128_grouped_gemm1(&facts.gemm1_bf16_128_blocks_per_sm) != cudaSuccess) {
        (void)cudaGetLastError();
        facts.gemm1_bf16_128_blocks_per_sm = 0;
      }
      // wgmma-rs: blocks per SM of one GEMM's kernel (g = 0: GEMM 1), 0 where it does not fit (a
      // failed probe leaves the form unavailable, never fails the layer).
      auto rs_fp8_per_sm = [](int g, int block_m, int block_n, bool narrow_tails) {
        int per_sm = 0;
        const cudaError_t err =
            g == 0 ? configure_sm90_mxfp4_rs_fp8_grouped_gemm1(block_m, &per_sm, block_n, narrow_tails)
                   : configure_sm90_mxfp4_rs_fp8_grouped_gemm2(block_m, &per_sm, block_n, narrow_tails);
        if (err == cudaSuccess) return per_sm;
        (void)cudaGetLastError();
        return 0;
      };
      for (int g = 0; g < 2; ++g) {
        // Both m tiles of the 128-row n tile, and both forms of the 64x256 tile (with and without
        // narrow tail tiles): each available where both fit.
        facts.wgmma_rs_blocks_per_sm[g] =
            std::min(rs_fp8_per_sm(g, 64, kRsFp8BlockN, false), rs_fp8_per_sm(g, 96, kRsFp8BlockN, false));
        facts.wgmma_rs_wide_blocks_per_sm[g] = std::min(rs_fp8_per_sm(g, 64, kRsFp8WideBlockN, false),
                                                        rs_fp8_per_sm(g, 64, kRsFp8WideBlockN, true));
      }
    }
  } else {
    probe_gemm_pair(&configure_sm90_nvfp4_rs_grouped_gemm1, &configure_sm90_nvfp4_rs_grouped_gemm2,
                    facts.nvfp4_wgmma_blocks_per_sm);
    probe_gemm_pair(&configure_sm90_nvfp4_rs_wide_grouped_gemm1, &configure_sm90_nvfp4_rs_wide_grouped_gemm2,
                    facts.nvfp4_wgmma_wide_blocks_per_sm);
  }
  select_sm90_kernels(config_, desc, overrides, facts);
  LayerShape planned = shape;  // 16-bit activation buckets add h as bf16 / f16 to the workspace (plan.h)
  planned.activations_16bit = config_.uses_16bit_activations();
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
  if (config_.fuse_combine) {  // the decode GEMM 2 with the combine: its kernels and counters
    const int k = static_cast<int>(shape.intermediate), depth = config_.decode_prefetch;
    int per_sm = 0;
    MOE_EP_CUDA_CHECK(mxfp4 ? configure_sm90_mxfp4_decode_gemm2_combine(depth, k, &per_sm)
                            : configure_sm90_nvfp4_decode_gemm2_combine(depth, k, &per_sm));
    MOE_EP_CHECK_CODE(per_sm > 0, ErrorCode::kUnsupported,
                      "overrides.fuse_combine = true: the decode GEMM 2 with the combine does not fit on cuda:{} "
                      "(K = {})", device_index, k);
    int64_t decode_tokens = 0;  // the counters cover the tokens of the decode buckets only
    for (const Sm90Bucket& b : config_.buckets)
      if (b.gemm == Sm90Gemm::kDecode || b.gemm == Sm90Gemm::kNvfp4Decode)
        decode_tokens = std::max(decode_tokens, b.max_tokens);
    combine_counters_ = DeviceBuffer(static_cast<size_t>(decode_tokens * (shape.hidden / kDecodeBlockN)) * 4);
    MOE_EP_CUDA_CHECK(cudaMemset(combine_counters_.get(), 0, combine_counters_.bytes()));
  }
  const Sm90GemmWeights w13{w13_tiles_.get(), w13_scales_.get(), w13_global_.get<float>(), w13_col_scale_.get<float>()};
  const Sm90GemmWeights w2{w2_tiles_.get(), w2_scales_.get(), w2_global_.get<float>(), w2_col_scale_.get<float>()};
  pipeline_ = std::make_unique<Sm90Pipeline>(
      config_, plan_, desc.quantize_input, desc.activation_clamp.value_or(std::numeric_limits<float>::infinity()),
      w13, w2, workspace_->get<std::byte>(), error_flags_.get<uint32_t>(), combine_counters_.get<uint32_t>());
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
  out.add("workspace_bytes", fmt::format("{} ({:.1f} MiB, this layer's plan; max rows {}, max m-tiles {}); "
                                         "scratch buffer {} bytes{}",
                                         plan_.workspace.total_bytes, plan_.workspace.total_bytes / 1048576.0,
                                         plan_.max_rows, plan_.max_m_tiles, workspace_->bytes(),
                                         shared_scratch_ ? ", shared with the runtime's other layers" : ""));
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
