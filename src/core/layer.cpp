// Layer::create and Layer::forward: every input is checked here, before any allocation or
// computation, so backends receive validated requests only (docs/spec.md §11).
#include "moe_ep/layer.h"

#include <cmath>
#include <string>
#include <vector>

#include <cstdlib>

#include "call_guard.h"
#include "check.h"
#include "core/tensor_checks.h"
#include "collective_create.h"
#include "core/registry.h"
#include "layer_impl.h"
#include "moe_ep/formats.h"
#include "moe_ep/quant.h"
#include "weight_prep.h"

namespace moe_ep {
namespace {

using detail::check_absent;
using detail::check_tensor;
using detail::Dim;

// ---- weights ----

// `one_expert`: the pack of replace_expert_weights (one routed expert, never the shared one).
void check_weight_layout(const WeightPack& w, const MoeDesc& desc, int64_t num_local,
                         Device layer_device, bool one_expert = false) {
  // Weights come from host memory (Device::cpu(): DLPack's CPU device id 0) or the layer's device.
  auto allowed = [&](Device d) { return d == Device::cpu() || d == layer_device; };
  const Device dev = w.w13.device;
  const bool dev_ok = allowed(dev);
  const std::string rule = layer_device.type == DeviceType::kCPU
                               ? std::string("cpu (the layer runs on cpu)")
                               : fmt::format("cpu or {} (the layer's device)", layer_device.str());
  const int64_t H = desc.fleet.hidden_size, I = desc.intermediate_size;
  const Dim e{num_local, "E_loc"}, i2{2 * I, "2I"}, h{H, "H"}, i{I, "I"};
  auto same_dev = [&](const TensorView& t) { return dev_ok && t.device == dev; };
  const std::string fmt_name(weight_format_name(w.format));
  const std::string why = fmt::format("with {} weights", fmt_name);

  switch (w.format) {
    case WeightFormat::kMXFP4:
    case WeightFormat::kNVFP4: {
      const bool mx = w.format == WeightFormat::kMXFP4;
      const RecipeTraits& traits = recipe_traits(mx ? Recipe::kMxfp4 : Recipe::kNvfp4);
      const int64_t block = traits.block;
      const DType scale_dtype = traits.scale_dtype;
      const char* h_blocks = mx ? "H/32" : "H/16";
      const char* i_blocks = mx ? "I/32" : "I/16";
      check_tensor(w.w13, "w13", {DType::kU8}, {e, i2, {H / 2, "H/2"}}, rule, dev_ok);
      check_tensor(w.w13_scale, "w13_scale", {DType::kU8, scale_dtype}, {e, i2, {H / block, h_blocks}},
                   rule, same_dev(w.w13_scale));
      check_tensor(w.w2, "w2", {DType::kU8}, {e, h, {I / 2, "I/2"}}, rule, same_dev(w.w2));
      check_tensor(w.w2_scale, "w2_scale", {DType::kU8, scale_dtype}, {e, h, {I / block, i_blocks}},
                   rule, same_dev(w.w2_scale));
      if (mx) {
        check_absent(w.w13_global, "w13_global", why);
        check_absent(w.w2_global, "w2_global", why);
      } else {
        check_tensor(w.w13_global, "w13_global", {DType::kF32}, {e, {2, "2"}}, rule,
                     same_dev(w.w13_global));
        check_tensor(w.w2_global, "w2_global", {DType::kF32}, {e}, rule, same_dev(w.w2_global));
      }
      break;
    }
    case WeightFormat::kBF16:
      check_tensor(w.w13, "w13", {DType::kBF16}, {e, i2, h}, rule, dev_ok);
      check_tensor(w.w2, "w2", {DType::kBF16}, {e, h, i}, rule, same_dev(w.w2));
      check_absent(w.w13_scale, "w13_scale", why);
      check_absent(w.w2_scale, "w2_scale", why);
      check_absent(w.w13_global, "w13_global", why);
      check_absent(w.w2_global, "w2_global", why);
      break;
    default:
      MOE_EP_FAIL(ErrorCode::kInvalidArgument, "weights.format = {} is not a known weight format; "
                  "expected mxfp4, nvfp4 or bf16", static_cast<int>(w.format));
  }

  const int64_t Is = desc.shared_intermediate_size;
  if (one_expert || Is == 0) {
    const char* why = one_expert ? "by replace_expert_weights (it replaces one routed expert)"
                                 : "when desc.shared_intermediate_size = 0 (no shared expert)";
    check_absent(w.shared_w13, "shared_w13", why);
    check_absent(w.shared_w2, "shared_w2", why);
    return;
  }
  // The shared expert's tensors may live apart from the routed ones.
  check_tensor(w.shared_w13, "shared_w13", {DType::kBF16}, {{2 * Is, "2Is"}, h}, rule, allowed(w.shared_w13.device));
  check_tensor(w.shared_w2, "shared_w2", {DType::kBF16}, {h, {Is, "Is"}}, rule, allowed(w.shared_w2.device));
}

bool pack_on_host(const WeightPack& w) { return w.w13.device.type == DeviceType::kCPU; }

void check_weight_format(const RecipeTraits& recipe, WeightFormat format) {
  MOE_EP_CHECK(recipe.accepts(format),
               "weights.format = {} is not accepted by recipe '{}'; expected one of {}",
               weight_format_name(format), recipe.name, [&] {
                 std::string s;
                 for (WeightFormat f : recipe.weight_formats)
                   s += fmt::format("{}{}", s.empty() ? "" : ", ", weight_format_name(f));
                 return s;
               }());
}

// ---- forward arguments ----

// Checks a caller-quantized activation in host memory (a device copy is the kernel's concern).
void check_activation_values(const ForwardArgs& args, const RecipeTraits& recipe) {
  const bool mxfp4 = !recipe.fp4_activations;
  const auto* scales = args.a_scale.ptr<const uint8_t>();
  for (int64_t i = 0; i < args.a_scale.numel(); ++i) {
    const bool bad = mxfp4 ? scales[i] == kE8M0NaN : (scales[i] & 0x7F) == 0x7F;
    MOE_EP_CHECK(!bad, "a_scale[{}, {}] = 0x{:02X} is a NaN {} scale; expected a finite scale",
                 i / args.a_scale.shape[1], i % args.a_scale.shape[1], scales[i],
                 mxfp4 ? "E8M0" : "e4m3");
  }
  if (mxfp4) {
    const auto* codes = args.a.ptr<const uint8_t>();
    for (int64_t i = 0; i < args.a.numel(); ++i)
      MOE_EP_CHECK((codes[i] & 0x7F) != 0x7F,
                   "a[{}, {}] = 0x{:02X} is an e4m3 NaN; expected finite e4m3 activations",
                   i / args.a.shape[1], i % args.a.shape[1], codes[i]);
  } else {
    const auto* g = args.a_global.ptr<const float>();
    for (int64_t t = 0; t < args.a_global.numel(); ++t)
      MOE_EP_CHECK(std::isfinite(g[t]) && g[t] > 0.0f,
                   "a_global[{}] = {} is invalid; expected a finite global encode factor > 0", t,
                   g[t]);
  }
}

template <class Id>
void check_host_ids(const TensorView& ids, int64_t num_experts) {
  const auto* p = ids.ptr<const Id>();
  for (int64_t i = 0; i < ids.numel(); ++i)
    MOE_EP_CHECK(p[i] >= -1 && p[i] < num_experts,
                 "topk_ids[{}, {}] = {} is outside [-1, num_experts = {}); expected a global "
                 "expert id or -1 (skip)",
                 i / ids.shape[1], i % ids.shape[1], static_cast<int64_t>(p[i]), num_experts);
}

void check_forward_args(const ForwardArgs& args, const LayerInfo& info) {
  const MoeDesc& config = info.desc;
  const RecipeTraits& recipe = config.traits();
  const Device dev = info.device;
  const std::string rule = fmt::format("{} (the layer's device)", dev.str());
  auto on = [&](const TensorView& t) { return t.device == dev; };
  const int64_t H = config.fleet.hidden_size, K = config.top_k;

  // T comes from the activation; every other tensor must agree with it.
  const TensorView& act = config.quantize_input ? args.x : args.a;
  const char* act_name = config.quantize_input ? "x" : "a";
  if (config.quantize_input) {
    MOE_EP_CHECK(args.x.defined(), "x is missing; desc.quantize_input = true needs x bf16 [T, H]");
    check_absent(args.a, "a", "when desc.quantize_input = true (the layer quantizes x)");
    check_absent(args.a_scale, "a_scale", "when desc.quantize_input = true (the layer quantizes x)");
    check_absent(args.a_global, "a_global", "when desc.quantize_input = true (the layer quantizes x)");
  } else {
    check_absent(args.x, "x", "when desc.quantize_input = false (pass a and a_scale)");
    MOE_EP_CHECK(args.a.defined(), "a is missing; desc.quantize_input = false needs the "
                 "quantized activation a and a_scale");
  }
  MOE_EP_CHECK(act.ndim == 2, "{} has shape {}; expected [T, H] with H = {}", act_name,
               act.shape_str(), H);
  const int64_t T = act.shape[0];
  MOE_EP_CHECK(T >= 0 && T <= config.fleet.max_tokens_per_rank,
               "{} has T = {} tokens; expected 0..max_tokens_per_rank = {} (FleetParams."
               "max_tokens_per_rank)", act_name, T, config.fleet.max_tokens_per_rank);
  const Dim t{T, "T"}, h{H, "H"}, k{K, "K"};

  if (config.quantize_input) {
    check_tensor(args.x, "x", {DType::kBF16}, {t, h}, rule, on(args.x));
  } else if (!recipe.fp4_activations) {
    check_tensor(args.a, "a", {DType::kE4M3, DType::kU8}, {t, h}, rule, on(args.a));
    check_tensor(args.a_scale, "a_scale", {DType::kU8, recipe.scale_dtype},
                 {t, {recipe.scale_count(H), "H/32"}}, rule, on(args.a_scale));
    check_absent(args.a_global, "a_global", fmt::format("by recipe '{}' (Q8 activations have no "
                                                        "global scale)", recipe.name));
  } else {
    check_tensor(args.a, "a", {DType::kU8}, {t, {recipe.code_bytes(H), "H/2"}}, rule, on(args.a));
    check_tensor(args.a_scale, "a_scale", {DType::kU8, recipe.scale_dtype},
                 {t, {recipe.scale_count(H), "H/16"}}, rule, on(args.a_scale));
    check_tensor(args.a_global, "a_global", {DType::kF32}, {t}, rule, on(args.a_global));
  }
  check_tensor(args.topk_ids, "topk_ids", {DType::kI32, DType::kI64}, {t, k}, rule,
               on(args.topk_ids));
  check_tensor(args.topk_weights, "topk_weights", {DType::kF32}, {t, k}, rule,
               on(args.topk_weights));
  check_tensor(args.y, "y", {DType::kBF16}, {t, h}, rule, on(args.y));

  // Host data is checked now; device data is checked by the kernels, which treat a bad id as
  // skipped and raise kErrorExpertIdOutOfRange (read with Layer::read_error_flags).
  if (dev.type == DeviceType::kCPU) {
    if (args.topk_ids.dtype == DType::kI32)
      check_host_ids<int32_t>(args.topk_ids, config.fleet.num_experts);
    else
      check_host_ids<int64_t>(args.topk_ids, config.fleet.num_experts);
    if (!config.quantize_input) check_activation_values(args, recipe);
  }
}

}  // namespace

void Layer::Impl::forward_rows(const ForwardArgs&, std::span<const int64_t>) {
  MOE_EP_FAIL(ErrorCode::kUnsupported, "forward_rows is supported on CPU layers only; this layer "
              "runs on {}", info.device.str());
}

Layer::Layer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Layer::~Layer() = default;

std::unique_ptr<Layer> Layer::create(std::shared_ptr<Runtime> runtime, const MoeDesc& desc,
                                     const WeightPack& weights, const KernelOverrides& overrides) {
  MOE_EP_CHECK_CODE(runtime != nullptr, ErrorCode::kRuntime,
                    "Layer::create: runtime is null: layer built on a released runtime; acquire "
                    "a Runtime first");
  validate_desc(desc, runtime->world_size());
  check_weight_format(desc.traits(), weights.format);
  const Device device = runtime->device();
  const std::string_view implementation =
      select_implementation(desc, runtime->world_size(), device, weights.format);
  const detail::BackendEntry* backend = detail::find_backend(device.type);
  MOE_EP_ASSERT(backend != nullptr && backend->info.name == implementation);

  const int64_t num_local = desc.fleet.num_experts / runtime->world_size();
  try {
    check_weight_layout(weights, desc, num_local, device);
    if (pack_on_host(weights))
      check_weight_values(weights);
    else
      check_shared_expert_values(weights);
  } catch (const Error& e) {
    detail::fail_collective_create(*runtime, e.message());  // the other ranks fail at once
    throw;
  }

  LayerRequest req;
  req.runtime = runtime;
  req.desc = desc;
  req.overrides = overrides;
  req.weights = weights;
  req.compute_capability = device_compute_capability(device);
  std::unique_ptr<Impl> impl = backend->create(req);
  LayerInfo& info = impl->info;
  info.desc = desc;
  info.implementation = std::string(implementation);
  info.device = device;
  info.num_local_experts = num_local;
  impl->runtime = std::move(runtime);
  if (const char* print = std::getenv("MOE_EP_PRINT_CONFIG"); print && *print && *print != '0')
    fmt::print(stderr, "moe_ep: layer {} on {} ({}):\n{}", info.implementation, device.str(),
               desc.str(), info.config.str());
  return std::unique_ptr<Layer>(new Layer(std::move(impl)));
}

void Layer::forward(const ForwardArgs& args) {
  const detail::LayerCallGuard guard(impl_.get(), *impl_->runtime, "Layer::forward");
  try {
    check_forward_args(args, impl_->info);
  } catch (const Error& e) {
    impl_->fail_forward(e.message());  // multi-rank layers: the other ranks fail too
    throw;
  }
  impl_->forward(args);
}

void Layer::replace_expert_weights(int64_t physical_expert, const WeightPack& one_expert) {
  const LayerInfo& info = impl_->info;
  const int64_t first = impl_->runtime->rank() * info.num_local_experts;
  MOE_EP_CHECK(physical_expert >= first && physical_expert < first + info.num_local_experts,
               "physical_expert = {} is not owned by rank {}; expected {}..{} (rank r owns "
               "[r*E_loc, (r+1)*E_loc) with E_loc = {})", physical_expert,
               impl_->runtime->rank(), first, first + info.num_local_experts - 1,
               info.num_local_experts);
  check_weight_format(info.desc.traits(), one_expert.format);
  check_weight_layout(one_expert, info.desc, 1, info.device, /*one_expert=*/true);
  if (pack_on_host(one_expert)) check_weight_values(one_expert);
  impl_->replace_expert_weights(physical_expert - first, one_expert);
}

void Layer::Impl::replace_expert_weights(int64_t, const WeightPack&) {
  MOE_EP_FAIL(ErrorCode::kUnsupported, "replace_expert_weights is not supported by the {} layer "
              "yet", info.implementation);
}

void Layer::forward_rows(const ForwardArgs& args, std::span<const int64_t> rows) {
  const detail::LayerCallGuard guard(impl_.get(), *impl_->runtime, "Layer::forward_rows");
  check_forward_args(args, impl_->info);
  const int64_t T = impl_->info.desc.quantize_input ? args.x.shape[0] : args.a.shape[0];
  for (size_t i = 0; i < rows.size(); ++i)
    MOE_EP_CHECK(rows[i] >= 0 && rows[i] < T, "rows[{}] = {} is outside [0, T = {})", i, rows[i], T);
  impl_->forward_rows(args, rows);
}

uint32_t Layer::read_error_flags(bool clear) { return impl_->read_error_flags(clear); }
void Layer::check_error_flags() {
  const uint32_t flags = read_error_flags(true);
  MOE_EP_CHECK_CODE(flags == 0, ErrorCode::kDevice,
                    "device error flags 0x{:x} raised (bit 0: a topk id outside [-1, num_experts) "
                    "was treated as skipped; bit 1: bad router input, see kErrorRouterInput)",
                    flags);
}
const LayerInfo& Layer::info() const { return impl_->info; }
Runtime& Layer::runtime() const { return *impl_->runtime; }

}  // namespace moe_ep
