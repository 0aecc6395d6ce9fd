// Real checkpoints: safetensors files (one, or shards listed by model.safetensors.index.json),
// the model's config.json, and one MoE layer's expert weights turned into a WeightPack.
//
// safetensors file layout (all of it untrusted; every field is checked against the file size
// before it is used, and an error names the file, the tensor and the field):
//
//   [0, 8)            u64 little-endian N: header length
//   [8, 8 + N)        JSON object { name: {"dtype": "U8", "shape": [..], "data_offsets": [b, e]},
//                                   "__metadata__": {str: str} (optional) }
//   [8 + N, size)     data section; tensor bytes at [8 + N + b, 8 + N + e), row-major,
//                     little-endian; e - b == numel * element size; no two tensors overlap.
//
// Files are memory-mapped read-only; a tensor's bytes are read only when a loader touches them.
//
// Expert-weight layouts of one layer L (shapes per docs/spec.md §2, B = 32 for MXFP4, 16 for NVFP4):
//
//   per-expert (DeepSeek / ModelOpt), tensor_pattern "model.layers.{L}.mlp.experts.{e}.{proj}.weight",
//   proj = gate_proj, up_proj, down_proj:
//     {proj}.weight          U8 [N, K/2] | F4 [N, K]   packed e2m1, low nibble = even k
//     {proj}.weight_scale    U8 | F8_E8M0       [N, K/32]  MXFP4
//                            F8_E4M3            [N, K/16]  NVFP4
//     {proj}.weight_scale_2  F32 scalar                    NVFP4 only (global, dequantized
//                                                          w = e2m1 * block scale * this)
//     {proj}.input_scale     F32 scalar                    NVFP4, optional (static activation
//                                                          scale; the recipes quantize
//                                                          activations dynamically)
//     gate [I, H/2] -> W13 rows [0, I), up -> rows [I, 2I), down [H, I/2] -> W2.
//   fused (as engines keep them), tensor_pattern "model.layers.{L}.mlp.experts.{proj}_weight",
//   proj = w13, w2:
//     w13_weight [E, 2I, H/2] (F4: [E, 2I, H]), w13_weight_scale [E, 2I, H/B], w13_weight_scale_2 [E, 2] | [E]
//     w2_weight  [E, H, I/2],  w2_weight_scale  [E, H, I/B],  w2_weight_scale_2  [E]
//   A user pattern is the weight tensor's name with {L}, {proj} and, for per-expert layouts,
//   {e}; it must end in "weight". The other names are derived: <w>_scale, <w>_scale_2, and
//   <w minus "weight">input_scale.
//
// Also read when present (layer L):
//   model.layers.{L}.mlp.gate.weight                   BF16 | F16 | F32 [E, H]  router
//   model.layers.{L}.mlp.gate.e_score_correction_bias  BF16 | F32 [E]          router bias
//   model.layers.{L}.mlp.shared_experts.{gate_proj,up_proj,down_proj}.weight
//       BF16, or F8_E4M3 with .weight_scale_inv F32 [ceil(N/bn), ceil(K/bk)] (block bn x bk from
//       quantization_config.weight_block_size, default 128 x 128), dequantized to bf16 on load.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moe_ep/weights.h"

namespace moe_ep {

// ---------------------------------------------------------------- safetensors files

struct CheckpointTensor {
  std::string name;
  std::string dtype;            // as in the file: "U8", "F8_E4M3", "F8_E8M0", "BF16", "F32",
                                // "F4" (packed e2m1, two a byte), ...
  std::vector<int64_t> shape;   // [] is a scalar; in elements (F4: twice the bytes)
  int element_bits = 0;         // 4 for F4, else 8 * bytes per element
  int64_t offset = 0;           // absolute byte offset of the data in the file
  int64_t nbytes = 0;
  const uint8_t* data = nullptr;  // in the read-only mapping; valid while the file is open
  const std::string* file = nullptr;  // path of the file holding it

  int64_t numel() const;
  std::string shape_str() const;  // "[4, 128]"
};

class SafetensorsFile {
 public:
  // Maps `path` and checks its header. Throws moe_ep::Error (kInvalidArgument) naming the file,
  // the tensor and the field for every inconsistency.
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t file_size() const { return size_; }
  int64_t header_size() const { return header_size_; }  // N
  const std::vector<CheckpointTensor>& tensors() const { return tensors_; }  // by offset
  const CheckpointTensor* find(std::string_view name) const;
  const std::vector<std::pair<std::string, std::string>>& metadata() const { return metadata_; }
  // Asks the kernel to read [offset, offset + nbytes) ahead (madvise WILLNEED).
  void prefetch(const CheckpointTensor& tensor) const;
  // Copies the tensor's bytes to dst with pread (no page faults in the mapping: ~5x faster than
  // memcpy from it on a page-cached file). Throws naming the file and tensor on a short read.
  void read(const CheckpointTensor& tensor, void* dst) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  int64_t size_ = 0, header_size_ = 0;
  const uint8_t* map_ = nullptr;
  int fd_ = -1;
  std::vector<CheckpointTensor> tensors_;
  std::vector<std::pair<std::string, size_t>> by_name_;  // sorted, index into tensors_
  std::vector<std::pair<std::string, std::string>> metadata_;
};

// ---------------------------------------------------------------- config.json

// The MoE keys of a DeepSeek-family config.json (or given explicitly).
struct ModelConfig {
  std::string source;                  // "DIR/config.json", or "explicit"
  std::string model_type;
  int64_t hidden_size = 0;             // H
  int64_t moe_intermediate_size = 0;   // I (falls back to intermediate_size)
  int64_t n_routed_experts = 0;        // E (falls back to num_local_experts)
  int64_t num_experts_per_tok = 0;     // K
  int64_t num_hidden_layers = 0;      // 0: not in the config
  int64_t first_k_dense_replace = 0;   // layers [0, this) are dense
  int64_t n_shared_experts = 0;
  float routed_scaling_factor = 1.0f;
  std::optional<float> swiglu_limit;   // the activation clamp, when the config has one
  // quantization_config
  std::string quant_method, quant_algo;  // "" when absent
  int64_t fp8_block_n = 128, fp8_block_k = 128;  // weight_block_size

  // Whether layer `layer` is a MoE layer by the config (first_k_dense_replace <= layer, and
  // layer < num_hidden_layers when that is known).
  bool is_moe_layer(int64_t layer) const;
};

// Parses config.json text; `source` names it in errors ("DIR/config.json: key 'hidden_size'
// is ..."). Missing required keys (hidden_size, moe_intermediate_size or intermediate_size,
// n_routed_experts or num_local_experts, num_experts_per_tok) and values of the wrong type or
// range are errors.
ModelConfig parse_model_config(std::string_view json_text, const std::string& source);

// ---------------------------------------------------------------- checkpoints

class Checkpoint {
 public:
  // `path`: a directory (model.safetensors.index.json, else model.safetensors, else every
  // *.safetensors in it; config.json when present) or one .safetensors file (config.json next
  // to it when present).
  static std::shared_ptr<const Checkpoint> open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::optional<ModelConfig>& config() const { return config_; }
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  int64_t total_tensor_bytes() const;
  std::vector<std::string> tensor_names() const;  // sorted

  const CheckpointTensor* find(std::string_view name) const;
  // Throws naming the tensor, its role ("expert 3 gate_proj weight") and the checkpoint.
  const CheckpointTensor& get(std::string_view name, std::string_view role) const;
  const SafetensorsFile& file_of(const CheckpointTensor& tensor) const;

 private:
  Checkpoint() = default;
  std::string path_;
  std::optional<ModelConfig> config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<std::pair<std::string, const CheckpointTensor*>> index_;  // sorted by name
  std::vector<std::pair<const CheckpointTensor*, size_t>> file_of_;     // sorted by pointer
};

// ---------------------------------------------------------------- one layer's weights

struct ExpertShapeOverride {  // explicit shapes, for checkpoints without config.json
  int64_t num_experts = 0, hidden_size = 0, intermediate_size = 0;
};

struct LayerLoadOptions {
  std::string layout = "auto";  // "auto", "per-expert", "fused"
  std::string tensor_pattern;   // "" = the layout's default (see above)
  std::vector<std::string> proj_names;  // "" = gate_proj,up_proj,down_proj / w13,w2
  std::optional<ExpertShapeOverride> shape;  // wins over config.json
  int64_t first_expert = 0;     // experts [first_expert, first_expert + num_experts) (an EP rank)
  int64_t num_experts = -1;     // -1: to the last expert
  int num_threads = 0;          // 0: std::thread::hardware_concurrency()
};

struct LoadStats {
  int64_t checkpoint_bytes = 0;  // bytes of the checkpoint tensors this layer read
  double seconds = 0.0;          // wall time of load_checkpoint_layer
  int num_threads = 1;
  double gbps() const { return seconds > 0 ? checkpoint_bytes / seconds * 1e-9 : 0.0; }
};

class CheckpointLayer {
 public:
  int64_t layer_idx = 0;
  WeightFormat format = WeightFormat::kMXFP4;  // kMXFP4 or kNVFP4
  int64_t num_experts = 0;     // experts in the pack (E_loc)
  int64_t total_experts = 0;   // E of the layer
  int64_t first_expert = 0;
  int64_t hidden_size = 0, intermediate_size = 0;
  std::string layout;          // "per-expert" or "fused"
  std::string tensor_pattern;  // with {L} filled in
  std::vector<std::string> notes;

  // Router, fp32 (bf16/f16 widened exactly); empty when absent.
  std::vector<float> router_weight;  // [total_experts, H]
  std::vector<float> router_bias;    // [total_experts]
  // Shared expert, bf16 bits; empty when absent. W13 rows [0, Is) gate, [Is, 2Is) up.
  int64_t shared_intermediate_size = 0;  // Is
  std::vector<uint16_t> shared_w13;      // [2Is, H]
  std::vector<uint16_t> shared_w2;       // [H, Is]
  // NVFP4 input_scale of each expert (gate, up, down), when the checkpoint has them.
  std::vector<float> input_scales;       // [num_experts, 3]

  LoadStats stats;

  // Views into this object's buffers or into the checkpoint's mapping (valid while both live):
  // the routed experts, and with_shared_expert() also the shared expert's bf16 weights (for a
  // MoeDesc with shared_intermediate_size = this->shared_intermediate_size; the routed pack when
  // the layer has none).
  WeightPack pack() const { return pack_; }
  WeightPack with_shared_expert() const;
  // Bytes of the pack's tensors (what a layer reads from it).
  int64_t pack_bytes() const;

 private:
  friend class CheckpointLayerBuilder;
  std::shared_ptr<const Checkpoint> checkpoint_;  // keeps the mapping alive
  std::shared_ptr<uint8_t> w13_, w13_scale_, w2_, w2_scale_;  // per-expert layouts: stacked here
  std::vector<float> w13_global_, w2_global_;
  WeightPack pack_;
};

// Loads and checks layer `layer` (dtypes, shapes, and scale values: 0xFF E8M0, NaN e4m3, bad
// global scales), multithreaded over experts. Throws moe_ep::Error naming the file, the tensor
// and what was expected.
std::unique_ptr<CheckpointLayer> load_checkpoint_layer(std::shared_ptr<const Checkpoint> checkpoint,
                                                       int64_t layer,
                                                       const LayerLoadOptions& options = {});

// Layers that hold routed-expert weights under `options`' layout, ascending.
std::vector<int64_t> find_moe_layers(const Checkpoint& checkpoint,
                                     const LayerLoadOptions& options = {});

// ---------------------------------------------------------------- weight statistics

// The FP8 window of docs/spec.md §5 over one MXFP4 layer (analyze_fp8_window of the library), with a
// histogram of per-row block-exponent spans (max - min E8M0 byte over a row's non-zero
// blocks; rows of zero blocks only count as span 0).
struct Fp8WindowReport {
  static constexpr int kMaxSpan = 14;  // rows with span <= kMaxSpan are inside
  int64_t rows = 0, rows_inside = 0;
  int64_t experts = 0, experts_inside = 0;
  int max_row_span = 0;
  int64_t w13_rows = 0, w13_rows_inside = 0, w2_rows = 0, w2_rows_inside = 0;
  std::vector<int64_t> span_histogram;  // [max_row_span + 1]: rows with that span
  std::string description;              // the library's one-line summary
};

// Throws kInvalidArgument for NVFP4 layers (the window is about MXFP4 block exponents).
Fp8WindowReport analyze_fp8_window(const CheckpointLayer& layer, int num_threads = 0);

}  // namespace moe_ep
