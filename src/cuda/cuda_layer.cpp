#include "cuda/cuda_layer.h"

#include <cstdlib>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "core/check.h"
#include "core/weight_prep.h"
#include "cpu/thread_pool.h"
#include "cuda/device_buffer.h"
#include "cuda/device_info.h"
#include "cuda/errors.h"
#include "cuda/kernels/sm90_combine.h"
#include "cuda/kernels/sm90_grouped_gemm.h"
#include "cuda/kernels/sm90_nvfp4_quantize.h"
#include "cuda/kernels/sm90_permute.h"
#include "cuda/kernels/sm90_q8_quantize.h"
#include "cuda/plan.h"
#include "cuda/weight_layout.h"

namespace moe_ep {
namespace cuda {
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

struct UploadedGemmWeights {
  DeviceBuffer tiles, scales, global;
};

UploadedGemmWeights upload(const KernelWeightTensor& t, const std::vector<float>& global) {
  UploadedGemmWeights u;
  u.tiles = DeviceBuffer::upload(t.tiles);
  u.scales = DeviceBuffer::upload(t.scales);
  u.global = DeviceBuffer::upload(global);
  return u;
}

// MOE_EP_SM90_GEMM = decode | mma | wgmma | auto (default auto), MOE_EP_SM90_WGMMA_TILE =
// 64x256 | 128x128, MOE_EP_SM90_DECODE_MAX_TOKENS = the auto limit of the decode kernels.
Sm90GemmChoice gemm_choice_from_env() {
  const char* v = std::getenv("MOE_EP_SM90_GEMM");
  const std::string s = v ? v : "";
  if (s.empty() || s == "auto") return Sm90GemmChoice::kAuto;
  if (s == "decode") return Sm90GemmChoice::kDecode;
  if (s == "mma") return Sm90GemmChoice::kMma;
  if (s == "wgmma") return Sm90GemmChoice::kWgmma;
  MOE_EP_FAIL(ErrorCode::kInvalidArgument, "MOE_EP_SM90_GEMM = '{}': expected decode, mma, wgmma or auto", s);
}

int64_t decode_max_tokens_from_env() {
  const char* v = std::getenv("MOE_EP_SM90_DECODE_MAX_TOKENS");
  if (!v || !*v) return kDecodeMaxTokens;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  MOE_EP_CHECK_CODE(end && *end == '\0' && n >= 0, ErrorCode::kInvalidArgument,
                    "MOE_EP_SM90_DECODE_MAX_TOKENS = '{}': expected a token count >= 0", v);
  return n;
}

WgmmaTile wgmma_tile_from_env() {
  const char* v = std::getenv("MOE_EP_SM90_WGMMA_TILE");
  const std::string s = v ? v : "";
  if (s.empty()) return kWgmmaDefaultTile;
  if (s == "64x256") return WgmmaTile::k64x256;
  if (s == "128x128") return WgmmaTile::k128x128;
  MOE_EP_FAIL(ErrorCode::kInvalidArgument, "MOE_EP_SM90_WGMMA_TILE = '{}': expected 64x256 or 128x128", s);
}

class CudaLayer final : public Layer::Impl {
 public:
  explicit CudaLayer(const LayerRequest& req) {
    MOE_EP_CHECK_CODE(req.runtime->world_size() == 1, ErrorCode::kUnsupported,
                      "the CUDA layer runs with world_size 1 only so far; got world_size = {}",
                      req.runtime->world_size());
    device_index_ = req.runtime->device().index;
    const CudaDeviceInfo dev = device_info(device_index_);
    MOE_EP_CUDA_CHECK(cudaSetDevice(device_index_));

    nvfp4_ = req.family->name == "nvfp4";
    quantize_input_ = req.config.quantize_input;
    fast_math_ = req.config.fast_math;
    exact_accumulation_ = req.config.exact_accumulation;
    clamp_ = req.config.activation_clamp.value_or(std::numeric_limits<float>::infinity());
    LayerShape shape{req.fleet.num_experts, req.fleet.hidden_size, req.config.intermediate_size,
                     req.config.top_k, req.fleet.max_tokens_per_rank, nvfp4_};

    // Kernel limits first: they fail before any large allocation.
    const size_t permute_smem = sm90_permute_shared_bytes(static_cast<int>(shape.num_experts));
    MOE_EP_CHECK_CODE(static_cast<int64_t>(permute_smem) <= dev.shared_per_block_optin,
                      ErrorCode::kUnsupported,
                      "num_experts = {} needs {} bytes of shared memory in the routing kernel; "
                      "cuda:{} allows {} per block", shape.num_experts, permute_smem,
                      device_index_, dev.shared_per_block_optin);
    MOE_EP_CUDA_CHECK(configure_sm90_permute(static_cast<int>(shape.num_experts)));
    DeviceLimits limits;
    limits.sm_count = dev.sm_count;
    if (nvfp4_) {
      MOE_EP_CUDA_CHECK(configure_sm90_nvfp4_grouped_gemm1(&limits.gemm1_blocks_per_sm));
      MOE_EP_CUDA_CHECK(configure_sm90_nvfp4_grouped_gemm2(&limits.gemm2_blocks_per_sm));
    } else {
      MOE_EP_CUDA_CHECK(configure_sm90_mxfp4_grouped_gemm1(&limits.gemm1_blocks_per_sm));
      MOE_EP_CUDA_CHECK(configure_sm90_mxfp4_grouped_gemm2(&limits.gemm2_blocks_per_sm));
    }
    MOE_EP_CHECK_CODE(limits.gemm1_blocks_per_sm > 0 && limits.gemm2_blocks_per_sm > 0,
                      ErrorCode::kUnsupported, "the grouped GEMM kernels do not fit on cuda:{} ({})",
                      device_index_, dev.name);
    plan_ = make_plan(shape, limits);

    // Weights: to host (when on the GPU), canonical per family, kernel layout, upload.
    const WeightPack& in = req.weights;
    HostCopy c13 = copy_to_host(in.w13), c13s = copy_to_host(in.w13_scale),
             c13g = copy_to_host(in.w13_global), c2 = copy_to_host(in.w2),
             c2s = copy_to_host(in.w2_scale), c2g = copy_to_host(in.w2_global);
    WeightPack host_pack{in.format, c13.view, c13s.view, c13g.view, c2.view, c2s.view, c2g.view};
    auto pool = cpu::shared_thread_pool(cpu::default_num_threads());
    auto parallel = [p = pool.get()](int64_t n, const std::function<void(int64_t)>& task) {
      p->parallel_for(n, task);
    };
    const ExpertShape expert_shape{shape.num_experts, shape.hidden, shape.intermediate};
    std::string notes;
    {
      HostExpertWeights canonical = prepare_host_weights(*req.family, host_pack, expert_shape, parallel);
      notes = canonical.notes;
      if (!nvfp4_) {
        notes += '\n';
        notes += describe_fp8_window(
            analyze_fp8_window(canonical, parallel),
            "a GEMM whose rows are all inside is folded (e4m3 = e2m1 * 2^(d - 8), one fp32 column "
            "factor; MOE_EP_SM90_FOLD=0 turns this off); with a row outside it keeps its E8M0 block "
            "scales, applied in fp32 at every k block (exact for any spread, slower)");
      } else {
        notes += "\nnvfp4 on SM90: operands decoded to f16 (e2m1 * e4m3 is exact in f16), f16 "
                 "tensor cores with fp32 accumulation, global scales applied in the epilogue";
      }
      // Folding is exact (SPEC.md §5) and needed by the wgmma GEMMs; MOE_EP_SM90_FOLD=0 keeps
      // the E8M0 block scales (for A/B runs of the mma.sync kernels).
      const char* fold_env = std::getenv("MOE_EP_SM90_FOLD");
      const bool fold = !(fold_env && std::string(fold_env) == "0");
      const KernelWeights kw =
          make_kernel_weights(canonical, parallel, fold ? Fp8Fold::kWhenInside : Fp8Fold::kNever);
      w13_ = upload(kw.w13, kw.w13_global);
      w2_ = upload(kw.w2, kw.w2_global);
      // Folded tensors carry shifts in place of E8M0 bytes: their column factors must go along.
      if (kw.w13.folded) w13_col_scale_ = DeviceBuffer::upload(kw.w13.row_factors());
      if (kw.w2.folded) w2_col_scale_ = DeviceBuffer::upload(kw.w2.row_factors());
      if (!nvfp4_)
        notes += fmt::format("\nsm90 weights: W13 {}, W2 {}", kw.w13.folded ? "folded" : "E8M0 block scales",
                             kw.w2.folded ? "folded" : "E8M0 block scales");
      configure_gemm_kernels(kw, shape, notes);
    }
    workspace_ = DeviceBuffer(plan_.workspace.total_bytes);
    error_flags_ = DeviceBuffer(sizeof(uint32_t));
    MOE_EP_CUDA_CHECK(cudaMemset(error_flags_.get(), 0, sizeof(uint32_t)));
    MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
    info.notes = notes + "\n" + plan_.describe();
    if (std::getenv("MOE_EP_PRINT_PLAN")) fmt::print(stderr, "moe_ep: {}\n", plan_.describe());
  }

  void forward(const ForwardArgs& args) override {
    const int64_t T = quantize_input_ ? args.x.shape[0] : args.a.shape[0];
    if (T == 0) return;
    int current = -1;
    MOE_EP_CUDA_CHECK(cudaGetDevice(&current));
    if (current != device_index_) MOE_EP_CUDA_CHECK(cudaSetDevice(device_index_));
    auto stream = static_cast<cudaStream_t>(args.stream);
    const LayerShape& s = plan_.shape;
    const WorkspaceLayout& w = plan_.workspace;
    const int64_t H = s.hidden, I = s.intermediate, K = s.top_k;
    const int64_t block = nvfp4_ ? 16 : 32;

    // 1. Activations.
    const uint8_t* a = quantize_input_ ? workspace_.get(w.a) : args.a.ptr<const uint8_t>();
    const uint8_t* a_scale = quantize_input_ ? workspace_.get(w.a_scale) : args.a_scale.ptr<const uint8_t>();
    const float* a_global = nullptr;
    if (nvfp4_) a_global = quantize_input_ ? workspace_.get<float>(w.a_global) : args.a_global.ptr<const float>();
    if (quantize_input_) {
      if (nvfp4_) {
        Nvfp4QuantizeParams q;
        q.in = args.x.data;
        q.in_is_bf16 = 1;
        q.cols = H;
        q.max_rows = static_cast<int32_t>(T);
        q.packed = workspace_.get(w.a);
        q.scales = workspace_.get(w.a_scale);
        q.global = workspace_.get<float>(w.a_global);
        MOE_EP_CUDA_CHECK(launch_sm90_nvfp4_quantize(q, stream));
      } else {
        Q8QuantizeParams q;
        q.x = args.x.ptr<const uint16_t>();
        q.rows = T;
        q.cols = H;
        q.q = workspace_.get(w.a);
        q.scales = workspace_.get(w.a_scale);
        MOE_EP_CUDA_CHECK(launch_sm90_q8_quantize(q, stream));
      }
    }

    // 2. Routing.
    PermuteParams r;
    r.topk_ids = args.topk_ids.data;
    r.ids_are_int64 = args.topk_ids.dtype == DType::kI64;
    r.topk_weights = args.topk_weights.ptr<const float>();
    r.num_tokens = static_cast<int32_t>(T);
    r.top_k = static_cast<int32_t>(K);
    r.num_experts = static_cast<int32_t>(s.num_experts);
    Sm90GemmKernels kernels = Sm90GemmKernels::kMma;
    if (!nvfp4_) {
      kernels = select_sm90_gemm_kernels(gemm_choice_, wgmma_available_, exact_accumulation_, T, decode_max_tokens_);
      if (kernels == Sm90GemmKernels::kDecode && !decode_available_) kernels = Sm90GemmKernels::kMma;
    }
    const bool wgmma = kernels == Sm90GemmKernels::kWgmma, decode = kernels == Sm90GemmKernels::kDecode;
    const WgmmaTileShape wgmma_shape = wgmma_tile_shape(wgmma_tile_);
    r.block_m = wgmma ? wgmma_shape.block_m : decode ? kDecodeBlockM : kGemmBlockM;
    r.expert_offsets = workspace_.get<int32_t>(w.expert_offsets);
    r.num_m_tiles = workspace_.get<int32_t>(w.num_m_tiles);
    r.tile_expert = workspace_.get<int32_t>(w.tile_expert);
    r.tile_row_begin = workspace_.get<int32_t>(w.tile_row_begin);
    r.row_token = workspace_.get<int32_t>(w.row_token);
    r.row_weight = workspace_.get<float>(w.row_weight);
    r.slot_row = workspace_.get<int32_t>(w.slot_row);
    r.error_flags = error_flags_.get<uint32_t>();
    MOE_EP_CUDA_CHECK(launch_sm90_permute(r, stream));

    GroupedGemmSchedule schedule{r.num_m_tiles, r.tile_expert, r.tile_row_begin, r.expert_offsets};

    // 3. GEMM 1 + SwiGLU (+ Q8 of h for mxfp4).
    Gemm1Params g1;
    g1.schedule = schedule;
    g1.op.n = static_cast<int32_t>(2 * I);
    g1.op.k = static_cast<int32_t>(H);
    g1.op.a = a;
    g1.op.a_row_bytes = nvfp4_ ? H / 2 : H;
    g1.op.a_scale = a_scale;
    g1.op.a_scale_row_bytes = H / block;
    g1.op.a_global = a_global;
    g1.op.a_row_index = r.row_token;
    g1.op.w = w13_.tiles.get();
    g1.op.w_scale = w13_.scales.get();
    g1.op.w_global = w13_.global.get<float>();
    g1.op.w_col_scale = w13_col_scale_.get<float>();
    g1.epilogue.row_weight = r.row_weight;
    g1.epilogue.clamp = clamp_;
    g1.epilogue.fast_math = fast_math_ ? 1 : 0;
    g1.epilogue.intermediate = static_cast<int32_t>(I);
    g1.epilogue.h_q = workspace_.get(w.h);
    g1.epilogue.h_scale = workspace_.get(w.h_scale);
    g1.epilogue.h_f32 = nvfp4_ ? workspace_.get<float>(w.h_f32) : nullptr;
    const int grid1 = plan_.gemm1_grid(T);
    if (nvfp4_) {
      MOE_EP_CUDA_CHECK(launch_sm90_nvfp4_grouped_gemm1(g1, grid1, stream));
      Nvfp4QuantizeParams q;
      q.in = workspace_.get(w.h_f32);
      q.in_is_bf16 = 0;
      q.cols = I;
      q.max_rows = static_cast<int32_t>(T * K);
      q.num_rows = r.expert_offsets + s.num_experts;
      q.packed = workspace_.get(w.h);
      q.scales = workspace_.get(w.h_scale);
      q.global = workspace_.get<float>(w.h_global);
      MOE_EP_CUDA_CHECK(launch_sm90_nvfp4_quantize(q, stream));
    } else if (decode) {
      MOE_EP_CUDA_CHECK(launch_sm90_mxfp4_decode_gemm1(g1, plan_.m_tile_bound(T, kDecodeBlockM), stream));
    } else if (wgmma) {
      const int grid = wgmma_gemm_grid(plan_, T, 2 * I, wgmma_shape.block_n, wgmma_blocks_per_sm_[0]);
      MOE_EP_CUDA_CHECK(launch_sm90_mxfp4_wgmma_grouped_gemm1(wgmma_tile_, g1, grid, stream));
    } else {
      MOE_EP_CUDA_CHECK(launch_sm90_mxfp4_grouped_gemm1(g1, grid1, stream));
    }

    // 4. GEMM 2.
    Gemm2Params g2;
    g2.schedule = schedule;
    g2.op.n = static_cast<int32_t>(H);
    g2.op.k = static_cast<int32_t>(I);
    g2.op.a = workspace_.get(w.h);
    g2.op.a_row_bytes = nvfp4_ ? I / 2 : I;
    g2.op.a_scale = workspace_.get(w.h_scale);
    g2.op.a_scale_row_bytes = I / block;
    g2.op.a_global = nvfp4_ ? workspace_.get<float>(w.h_global) : nullptr;
    g2.op.w = w2_.tiles.get();
    g2.op.w_scale = w2_.scales.get();
    g2.op.w_global = w2_.global.get<float>();
    g2.op.w_col_scale = w2_col_scale_.get<float>();
    g2.epilogue.out = workspace_.get<uint16_t>(w.o);
    const int grid2 = plan_.gemm2_grid(T);
    if (nvfp4_)
      MOE_EP_CUDA_CHECK(launch_sm90_nvfp4_grouped_gemm2(g2, grid2, stream));
    else if (decode)
      MOE_EP_CUDA_CHECK(launch_sm90_mxfp4_decode_gemm2(g2, plan_.m_tile_bound(T, kDecodeBlockM), stream));
    else if (wgmma)
      MOE_EP_CUDA_CHECK(launch_sm90_mxfp4_wgmma_grouped_gemm2(
          wgmma_tile_, g2, wgmma_gemm_grid(plan_, T, H, wgmma_shape.block_n, wgmma_blocks_per_sm_[1]), stream));
    else
      MOE_EP_CUDA_CHECK(launch_sm90_mxfp4_grouped_gemm2(g2, grid2, stream));

    // 5. Combine.
    CombineParams c;
    c.o = g2.epilogue.out;
    c.slot_row = r.slot_row;
    c.y = args.y.ptr<uint16_t>();
    c.num_tokens = static_cast<int32_t>(T);
    c.top_k = static_cast<int32_t>(K);
    c.hidden = static_cast<int32_t>(H);
    MOE_EP_CUDA_CHECK(launch_sm90_combine(c, stream));
  }

  // The decode GEMMs need n a multiple of kDecodeBlockN and 16 rows of A in shared memory;
  // the wgmma GEMMs folded weights and n a multiple of the tile's block_n. Forcing a kernel
  // where it cannot run fails here.
  void configure_gemm_kernels(const KernelWeights& kw, const LayerShape& shape, std::string& notes) {
    gemm_choice_ = gemm_choice_from_env();
    wgmma_tile_ = wgmma_tile_from_env();
    decode_max_tokens_ = decode_max_tokens_from_env();
    if (nvfp4_) return;
    configure_decode(shape, notes);
    configure_wgmma(kw, shape, notes);
  }

  void configure_decode(const LayerShape& shape, std::string& notes) {
    std::string why;
    if (shape.hidden % kDecodeBlockN != 0 || (2 * shape.intermediate) % kDecodeBlockN != 0) {
      why = fmt::format("hidden = {} and 2 * intermediate = {} must be multiples of {}", shape.hidden,
                        2 * shape.intermediate, kDecodeBlockN);
    } else {
      // Too much shared memory (16 x H bytes of A) is refused by the attribute call: not an error
      // of the layer, the decode kernels are just not available (the failed call is not sticky).
      int blocks[2] = {0, 0};
      const bool ok = configure_sm90_mxfp4_decode_gemm1(static_cast<int>(shape.hidden), &blocks[0]) == cudaSuccess &&
                      configure_sm90_mxfp4_decode_gemm2(static_cast<int>(shape.intermediate), &blocks[1]) == cudaSuccess;
      if (!ok) (void)cudaGetLastError();
      if (!ok || blocks[0] < 1 || blocks[1] < 1)
        why = fmt::format("16 rows of A (16 x {} bytes) do not fit in shared memory", shape.hidden);
    }
    decode_available_ = why.empty();
    MOE_EP_CHECK_CODE(decode_available_ || gemm_choice_ != Sm90GemmChoice::kDecode, ErrorCode::kUnsupported,
                      "MOE_EP_SM90_GEMM = decode: the decode GEMMs cannot run this layer: {}", why);
    notes += decode_available_ ? fmt::format("\nsm90 GEMMs: decode (16-row tiles) for T <= {}", decode_max_tokens_)
                               : "\nsm90 GEMMs: no decode kernels (" + why + ")";
  }

  void configure_wgmma(const KernelWeights& kw, const LayerShape& shape, std::string& notes) {
    const WgmmaTileShape ts = wgmma_tile_shape(wgmma_tile_);
    std::string why;
    if (!kw.w13.folded || !kw.w2.folded)
      why = "the weights are not inside the FP8 window (SPEC.md §5), so they are not folded";
    else if (shape.hidden % ts.block_n != 0 || (2 * shape.intermediate) % ts.block_n != 0)
      why = fmt::format("hidden = {} and 2 * intermediate = {} must be multiples of {}", shape.hidden,
                        2 * shape.intermediate, ts.block_n);
    if (why.empty()) {
      MOE_EP_CUDA_CHECK(configure_sm90_mxfp4_wgmma_grouped_gemm1(wgmma_tile_, &wgmma_blocks_per_sm_[0]));
      MOE_EP_CUDA_CHECK(configure_sm90_mxfp4_wgmma_grouped_gemm2(wgmma_tile_, &wgmma_blocks_per_sm_[1]));
      if (wgmma_blocks_per_sm_[0] < 1 || wgmma_blocks_per_sm_[1] < 1) why = "the kernels do not fit on this device";
    }
    wgmma_available_ = why.empty();
    MOE_EP_CHECK_CODE(wgmma_available_ || gemm_choice_ != Sm90GemmChoice::kWgmma, ErrorCode::kUnsupported,
                      "MOE_EP_SM90_GEMM = wgmma: the wgmma GEMMs cannot run this layer: {}", why);
    notes += wgmma_available_
                 ? fmt::format("\nsm90 GEMMs: wgmma {}x{} (folded weights) {}, mma.sync otherwise{}",
                               ts.block_m, ts.block_n,
                               exact_accumulation_ ? std::string("off (exact_accumulation)")
                                                   : fmt::format("from T >= {}", kWgmmaMinTokens),
                               gemm_choice_ == Sm90GemmChoice::kAuto ? "" : " (forced by MOE_EP_SM90_GEMM)")
                 : "\nsm90 GEMMs: mma.sync only (wgmma: " + why + ")";
  }

  // Synchronizes the device (by design: the caller picks the point).
  uint32_t read_error_flags(bool clear) override {
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

 private:
  int device_index_ = 0;
  bool nvfp4_ = false, quantize_input_ = true, fast_math_ = false, exact_accumulation_ = false;
  float clamp_ = 0.0f;
  Plan plan_;
  UploadedGemmWeights w13_, w2_;
  DeviceBuffer w13_col_scale_, w2_col_scale_;  // folded mxfp4: [E][N] column factors
  Sm90GemmChoice gemm_choice_ = Sm90GemmChoice::kAuto;
  WgmmaTile wgmma_tile_ = kWgmmaDefaultTile;
  bool wgmma_available_ = false;
  bool decode_available_ = false;
  int64_t decode_max_tokens_ = kDecodeMaxTokens;
  int wgmma_blocks_per_sm_[2] = {0, 0};
  DeviceBuffer workspace_, error_flags_;
};

}  // namespace
}  // namespace cuda

std::unique_ptr<Layer::Impl> make_cuda_layer(const LayerRequest& request) {
  return std::make_unique<cuda::CudaLayer>(request);
}

}  // namespace moe_ep
