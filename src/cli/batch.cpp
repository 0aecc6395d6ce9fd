#include "cli/batch.h"

namespace moe_ep::cli {
namespace {

TensorView to_device(Driver& driver, const TensorView& host) {
  TensorView t = host;
  t.device = driver.device();
  t.data = driver.allocate(host.nbytes());
  driver.upload(t.data, host.data, host.nbytes());
  return t;
}

}  // namespace

DeviceBatch upload_batch(Driver& driver, const testing::HostInputs& in) {
  DeviceBatch b;
  b.args.x = to_device(driver, in.x_view());
  b.args.topk_ids = to_device(driver, in.topk_ids_view());
  b.args.topk_weights = to_device(driver, in.topk_weights_view());
  b.y_bytes = in.num_tokens * in.hidden_size * 2;
  b.args.y = TensorView::contiguous(driver.allocate(b.y_bytes), DType::kBF16,
                                    {in.num_tokens, in.hidden_size}, driver.device());
  b.args.stream = driver.stream();
  driver.synchronize();
  return b;
}

void poison_y(Driver& driver, const DeviceBatch& b) {
  driver.fill(b.args.y.data, 0xFF, b.y_bytes);
  driver.synchronize();
}

std::vector<uint16_t> download_y(Driver& driver, const DeviceBatch& b) {
  driver.synchronize();
  std::vector<uint16_t> y(static_cast<size_t>(b.y_bytes / 2));
  driver.download(y.data(), b.args.y.data, b.y_bytes);
  return y;
}

WeightPack slice_pack(const WeightPack& all, int64_t first, int64_t count) {
  auto slice = [&](TensorView t) {
    if (!t.defined()) return t;
    const int64_t per = t.numel() / t.shape[0];
    t.data = static_cast<uint8_t*>(t.data) + first * per * dtype_size(t.dtype);
    t.shape[0] = count;
    return t;
  };
  WeightPack p = all;
  for (TensorView* t : {&p.w13, &p.w13_scale, &p.w13_global, &p.w2, &p.w2_scale, &p.w2_global}) *t = slice(*t);
  return p;
}

}  // namespace moe_ep::cli
