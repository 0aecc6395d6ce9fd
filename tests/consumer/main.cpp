// One forward of a small CPU layer through the installed headers and library only.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include <moe_ep/moe_ep.h>

int main() {
  using namespace moe_ep;
  constexpr int64_t E = 4, H = 128, I = 128, K = 2, T = 3;  // H, I: multiples of 128 (mxfp4)
  MoeDesc desc;
  desc.fleet = {.num_experts = E, .max_tokens_per_rank = T, .hidden_size = H};
  desc.intermediate_size = I;
  desc.top_k = K;
  desc.activation_clamp = 10.0f;

  // bf16 weights with a deterministic pattern; the layer quantizes them to MXFP4.
  std::vector<uint16_t> w13(E * 2 * I * H), w2(E * H * I), x(T * H), y(T * H, 0xFFFF);
  for (size_t i = 0; i < w13.size(); ++i) w13[i] = float_to_bf16(0.05f * float(int(i % 13) - 6));
  for (size_t i = 0; i < w2.size(); ++i) w2[i] = float_to_bf16(0.05f * float(int(i % 7) - 3));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float_to_bf16(float(int(i % 5) - 2));
  std::vector<int32_t> ids = {0, 1, 2, -1, 3, 0};
  std::vector<float> weights = {0.5f, 0.5f, 1.0f, 0.0f, 0.25f, 0.75f};

  WeightPack pack;
  pack.format = WeightFormat::kBF16;
  pack.w13 = TensorView::contiguous(w13.data(), DType::kBF16, {E, 2 * I, H});
  pack.w2 = TensorView::contiguous(w2.data(), DType::kBF16, {E, H, I});
  try {
    auto runtime = Runtime::acquire(Bootstrap{});
    auto layer = Layer::create(runtime, desc, pack);
    ForwardArgs args;
    args.x = TensorView::contiguous(x.data(), DType::kBF16, {T, H});
    args.topk_ids = TensorView::contiguous(ids.data(), DType::kI32, {T, K});
    args.topk_weights = TensorView::contiguous(weights.data(), DType::kF32, {T, K});
    args.y = TensorView::contiguous(y.data(), DType::kBF16, {T, H});
    layer->forward(args);
    double sum = 0;
    for (uint16_t v : y) {
      const float f = bf16_to_float(v);
      if (!std::isfinite(f)) {
        std::fprintf(stderr, "consumer: non-finite output\n");
        return 1;
      }
      sum += std::fabs(f);
    }
    if (sum == 0) {
      std::fprintf(stderr, "consumer: all-zero output\n");
      return 1;
    }
    std::printf("consumer: %s, workspace %lld bytes, sum|y| = %.4f\n",
                layer->info().implementation.c_str(),
                static_cast<long long>(workspace_bytes(1, E, T, H, I, K)), sum);
  } catch (const Error& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
  return 0;
}
