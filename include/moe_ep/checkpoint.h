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
// Expert-weight layouts of one layer L (shapes per docs/spec.md §2, B = 32 for MXFP4, 16 for
// NVFP4; N rows, K the reduction dimension). LayerLoadOptions::layout names one, or "auto" takes
// the first whose tensors layer L has, in this order:
//
//   per-expert (DeepSeek V3 / ModelOpt / Qwen3-MoE): "model.layers.{L}.mlp.experts.{e}.{proj}.weight",
//   proj = gate_proj, up_proj, down_proj:
//     {proj}.weight          U8 | I8 [N, K/2] | F4 [N, K]   packed e2m1, low nibble = even k
//     {proj}.weight_scale    U8 | F8_E8M0       [N, K/32]  MXFP4
//                            F8_E4M3            [N, K/16]  NVFP4
//     {proj}.weight_scale_2  F32 scalar                    NVFP4 only (global, dequantized
//                                                          w = e2m1 * block scale * this)
//     {proj}.input_scale     F32 scalar                    NVFP4, optional (static activation
//                                                          scale; the recipes quantize
//                                                          activations dynamically)
//     or {proj}.weight BF16 | F16 | F32 [N, K]: unquantized (format kBF16; F16 / F32 rounded to
//     bf16, nearest even); the layer quantizes them to its recipe.
//     gate [I, H/2] -> W13 rows [0, I), up -> rows [I, 2I), down [H, I/2] -> W2.
//   deepseek-v4 (DeepSeek V4's own files): "layers.{L}.ffn.experts.{e}.{proj}.weight", proj = w1
//     (gate), w3 (up), w2 (down); I8 packed e2m1 [N, K/2] with {proj}.scale F8_E8M0 [N, K/32]:
//     MXFP4 as stored (the scale of a ".weight" tensor is "<w>_scale", else "<w minus weight>scale").
//   compressed-tensors (llm-compressor): "model.layers.{L}.mlp.experts.{e}.{proj}.weight_packed"
//     U8 [N, K/2] with {proj}.weight_scale F8_E4M3 [N, K/16] and {proj}.weight_global_scale F32
//     scalar g (NVFP4; weight_scale_2 = fp32(1 / g), exact when g is a power of two, else the
//     nearest fp32), or {proj}.weight_scale U8 | F8_E8M0 [N, K/32] (MXFP4).
//   fused (vLLM's parameters): "model.layers.{L}.mlp.experts.{proj}_weight", proj = w13, w2:
//     w13_weight [E, 2I, H/2] (F4: [E, 2I, H]), w13_weight_scale [E, 2I, H/B], w13_weight_scale_2 [E, 2] | [E]
//     w2_weight  [E, H, I/2],  w2_weight_scale  [E, H, I/B],  w2_weight_scale_2  [E]
//   transformers (fused experts as transformers keeps them, e.g. DeepSeek V4):
//     "model.layers.{L}.mlp.experts.{proj}", proj = gate_up_proj [E, 2I, H] (gate rows first),
//     down_proj [E, H, I]; BF16 | F16 | F32 (format kBF16, as per-expert's unquantized weights).
//     Expert biases ({proj}_bias) are refused (kUnsupported): docs/spec.md's layer has none.
//   gpt-oss: "model.layers.{L}.mlp.experts.{proj}_blocks": recognized and refused (kUnsupported)
//     naming the reasons: expert biases, and gpt-oss's activation (gate and up interleaved,
//     gate * sigmoid(1.702 gate) * (up + 1)), which is not the clamped SwiGLU of docs/spec.md.
//   A user pattern (LayerLoadOptions::tensor_pattern) is the weight tensor's name with {L},
//   {proj} and, for per-expert layouts, {e}; its ending picks the companions' names: "weight"
//   (<w>_scale or <w minus weight>scale, <w>_scale_2, <w minus weight>input_scale),
//   "weight_packed" (compressed-tensors), "_blocks" (gpt-oss, refused); a fused pattern with
//   another ending names unquantized tensors (transformers).
//
// Also read when present, under the layer's block prefix P (the pattern before "experts":
// "model.layers.{L}.mlp." or "layers.{L}.ffn."):
//   P gate.weight                   BF16 | F16 | F32 [E, H]   router (CheckpointRouter)
//   P gate.e_score_correction_bias  BF16 | F16 | F32 [E]      router bias (or P gate.bias)
//   P gate.tid2eid                  I32 | I64 [vocab, K]     hash layer's table, entries in [0, E)
//   P shared_experts.{gate_proj,up_proj,down_proj}.weight (or {w1,w3,w2}), dequantized to bf16 on
//   load (LayerLoadOptions::shared_expert = false leaves it out), each element
//       BF16 | F16 | F32   bf16(v) (F16 and F32 rounded to nearest even)
//       F8_E4M3 + one scale per bn x bk block, .weight_scale_inv or .scale, F32 | BF16 | F8_E8M0
//                [ceil(N/bn), ceil(K/bk)] (quantization_config.weight_block_size, else 128 x 128),
//                or a scalar .weight_scale: bf16(fp32(e4m3 * scale)) (exact for E8M0 scales)
//       U8 packed e2m1 + .weight_scale F8_E4M3 [N, K/16] + .weight_scale_2 F32 scalar (ModelOpt
//                NVFP4): bf16(fp32(e2m1 * e4m3) * weight_scale_2), the first product exact
//       U8 packed e2m1 + .weight_scale U8 | F8_E8M0 [N, K/32] (MXFP4): bf16(e2m1 * 2^(b - 127)),
//                exact unless it leaves bf16's range
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moe_ep/router.h"
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

// The MoE keys of a config.json (DeepSeek V3/V4, transformers' DeepSeek V4, ModelOpt, Qwen3-MoE,
// Mixtral), or given explicitly.
//
// Every layout reads the shape keys (hidden_size, the expert width, the expert count,
// num_experts_per_tok), the layer range (num_hidden_layers, first_k_dense_replace) and the
// activation's keys (swiglu_limit, routed_scaling_factor): a bad value of one of those refuses the
// checkpoint when it is opened. The other keys are read by some layouts or by the router only
// (quantization_config, scoring_func, num_hash_layers, mlp_layer_types, vocab_size,
// n_shared_experts): a value of the wrong type is recorded in `ignored` instead, and only a reader
// that needs the key fails, naming it.
struct ModelConfig {
  std::string source;                  // "DIR/config.json", or "explicit"
  std::string model_type;
  int64_t hidden_size = 0;             // H
  int64_t moe_intermediate_size = 0;   // I (falls back to intermediate_size)
  int64_t n_routed_experts = 0;        // E (falls back to num_local_experts, num_experts)
  int64_t num_experts_per_tok = 0;     // K
  int64_t num_hidden_layers = 0;      // 0: not in the config
  int64_t first_k_dense_replace = 0;   // layers [0, this) are dense
  int64_t n_shared_experts = 0;
  float routed_scaling_factor = 1.0f;
  std::optional<float> swiglu_limit;   // the activation clamp, when the config has one
  // The router (DeepSeek V4: scoring_func "sqrtsoftplus"; hash layers route by a tid2eid table).
  std::string scoring_func;                  // "" when absent
  std::optional<int64_t> num_hash_layers;    // the first N layers are hash layers
  std::vector<std::string> mlp_layer_types;  // transformers' per-layer "hash_moe" / "moe"
  int64_t vocab_size = 0;                    // 0: not in the config
  // quantization_config
  std::string quant_method, quant_algo;  // "" when absent
  int64_t fp8_block_n = 128, fp8_block_k = 128;  // weight_block_size (128 x 128 when absent)
  bool fp8_block_given = false;                  // weight_block_size was in the config

  // A key present with a value no reader can use, and why; `value` is a short excerpt.
  struct IgnoredKey {
    std::string key, value, reason;
  };
  std::vector<IgnoredKey> ignored;
  // The entry of `key` ("quantization_config.weight_block_size"), nullptr when it was usable.
  const IgnoredKey* ignored_key(std::string_view key) const;

  // Whether layer `layer` is a MoE layer by the config (first_k_dense_replace <= layer, and
  // layer < num_hidden_layers when that is known).
  bool is_moe_layer(int64_t layer) const;
  // Whether the config makes `layer` a hash layer (mlp_layer_types[layer] == "hash_moe", else
  // layer < num_hash_layers); nullopt when it says neither.
  std::optional<bool> is_hash_layer(int64_t layer) const;
};

// Parses config.json text; `source` names it in errors ("DIR/config.json: key 'hidden_size'
// is ..."). Missing required keys (hidden_size, moe_intermediate_size or intermediate_size,
// n_routed_experts or num_local_experts or num_experts, num_experts_per_tok) and values of the
// wrong type or range of the keys every layout reads are errors; see ModelConfig for the rest.
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
  std::string layout = "auto";  // "auto" or a layout of known_checkpoint_layouts() (see above)
  std::string tensor_pattern;   // "" = the layout's default (see above)
  std::vector<std::string> proj_names;  // "" = the layout's (gate_proj,up_proj,down_proj / w13,w2 / ...)
  std::optional<ExpertShapeOverride> shape;  // wins over config.json
  int64_t first_expert = 0;     // experts [first_expert, first_expert + num_experts) (an EP rank)
  int64_t num_experts = -1;     // -1: to the last expert
  int num_threads = 0;          // 0: std::thread::hardware_concurrency()
  bool shared_expert = true;    // false: leave the checkpoint's shared expert out (noted)
};

struct LoadStats {
  int64_t checkpoint_bytes = 0;  // bytes of the checkpoint tensors this layer read
  double seconds = 0.0;          // wall time of load_checkpoint_layer
  int num_threads = 1;
  double gbps() const { return seconds > 0 ? checkpoint_bytes / seconds * 1e-9 : 0.0; }
};

// The router of one MoE layer as the checkpoint holds it, with the config.json keys that define
// its function; what route_deepseek_v4 (include/moe_ep/router.h) needs to route the layer's
// tokens on the host, and what a device routing stage uploads.
struct CheckpointRouter {
  int64_t num_experts = 0, hidden_size = 0;  // E (all experts of the layer), H
  std::vector<float> weight;          // [E, H] gate weight, fp32 (bf16 / f16 widened exactly)
  std::vector<float> bias;            // [E] score-correction bias (selection only); empty: none
  std::vector<int32_t> hash_table;    // [vocab_size, hash_top_k] tid2eid; empty: not a hash layer
  int64_t vocab_size = 0, hash_top_k = 0;
  float routed_scaling_factor = 1.0f;  // config.json's (1 when absent)
  std::string scoring_func;            // config.json's; "" when absent
  std::optional<bool> config_hash_layer;  // what config.json says of this layer, when it says
  std::string weight_name, bias_name, hash_table_name;  // the tensors read ("" when absent)

  bool present() const { return !weight.empty(); }
  bool hash_layer() const { return !hash_table.empty(); }
  // Why route_deepseek_v4 does not compute this checkpoint's router, "" when it does: no gate
  // weight, a scoring_func other than "sqrtsoftplus" (absent counts as it only for model_type
  // deepseek_v4), a table whose width is not top_k, or config.json and the tensors disagreeing
  // on whether the layer is a hash layer.
  std::string unsupported_reason(int64_t top_k, std::string_view model_type) const;
  // The router config of this one layer for route_deepseek_v4 with RouterArgs::layer_idx = 0
  // (num_hash_layers is 1 for a hash layer, else 0).
  RouterConfig config(int64_t top_k) const;
};

class CheckpointLayer {
 public:
  int64_t layer_idx = 0;
  WeightFormat format = WeightFormat::kMXFP4;  // kMXFP4, kNVFP4, or kBF16 (unquantized experts)
  int64_t num_experts = 0;     // experts in the pack (E_loc)
  int64_t total_experts = 0;   // E of the layer
  int64_t first_expert = 0;
  int64_t hidden_size = 0, intermediate_size = 0;
  std::string layout;          // the layout's name ("per-expert", "deepseek-v4", ...; a user
                               // pattern's is "per-expert" or "fused")
  std::string tensor_pattern;  // with {L} filled in
  std::vector<std::string> notes;

  CheckpointRouter router;  // router.present() is false when the checkpoint has no gate weight
  // Shared expert, bf16 bits; empty when absent (or left out). W13 rows [0, Is) gate, [Is, 2Is) up.
  int64_t shared_intermediate_size = 0;  // Is
  std::vector<uint16_t> shared_w13;      // [2Is, H]
  std::vector<uint16_t> shared_w2;       // [H, Is]
  std::string shared_source;             // how it was stored ("F8_E4M3 with F8_E8M0 block scales")
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

// The layouts LayerLoadOptions::layout accepts besides "auto", in the order "auto" tries them.
struct CheckpointLayoutInfo {
  std::string name;     // "per-expert", "deepseek-v4", ...
  std::string pattern;  // the expert weight tensors, with {L}, {e}, {proj}
  std::vector<std::string> proj_names;
  std::string origin;   // who writes it and how it loads (or why it is refused)
};
std::vector<CheckpointLayoutInfo> known_checkpoint_layouts();

// Tensors whose names look like MoE experts (the word "expert", or gpt-oss's "_blocks"), sorted
// by name, at most `max_count`: what a report shows when no layout matches.
std::vector<const CheckpointTensor*> expert_like_tensors(const Checkpoint& checkpoint,
                                                         size_t max_count);

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

// Throws kInvalidArgument for NVFP4 and bf16 layers (the window is about MXFP4 block exponents).
Fp8WindowReport analyze_fp8_window(const CheckpointLayer& layer, int num_threads = 0);

}  // namespace moe_ep
