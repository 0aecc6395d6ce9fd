// Broken checkpoints (tests/python/gen_checkpoints.py, bad/): each must fail with a
// kInvalidArgument error that names the file (or the checkpoint / config), the tensor and the
// field, while opening or while loading layer 1; nothing may crash.
#include <gtest/gtest.h>

#include <set>

#include "checkpoint/checkpoint_test_data.h"
#include "moe_ep/checkpoint.h"
#include "moe_ep/error.h"

namespace moe_ep {
namespace {

enum class Stage { kOpen, kLoad };

struct BadCase {
  const char* name;
  Stage stage;
  std::vector<std::string> message_parts;  // each must appear in the error
};

const std::string kL1 = "model.layers.1.mlp.experts.";

const std::vector<BadCase>& bad_cases() {
  static const std::vector<BadCase> kCases = {
      {"truncated", Stage::kOpen,
       {"truncated/model.safetensors", "tensor '" + kL1, "data_offsets", "reaches past the data section"}},
      {"header_length_beyond_file", Stage::kOpen,
       {"header_length_beyond_file/model.safetensors", "header length 1099511627776", "beyond the file"}},
      {"header_length_zero", Stage::kOpen, {"header_length_zero/model.safetensors", "header length 0"}},
      {"shorter_than_8_bytes", Stage::kOpen, {"shorter_than_8_bytes/model.safetensors", "file is 3 bytes"}},
      {"header_not_json", Stage::kOpen, {"header_not_json/model.safetensors", "header is not valid JSON"}},
      {"header_not_object", Stage::kOpen, {"header_not_object/model.safetensors", "expected a JSON object"}},
      {"duplicate_tensor", Stage::kOpen, {"duplicate_tensor/model.safetensors", "names tensor 'a' twice"}},
      {"offsets_past_end", Stage::kOpen,
       {"offsets_past_end/model.safetensors", "tensor '" + kL1 + "2.up_proj.weight'", "'data_offsets'",
        "reaches past the data section"}},
      {"offsets_length_mismatch", Stage::kOpen,
       {"offsets_length_mismatch/model.safetensors", "tensor '" + kL1 + "2.up_proj.weight_scale'",
        "'data_offsets'", "spans 504 bytes", "needs 512"}},
      {"offsets_reversed", Stage::kOpen,
       {"offsets_reversed/model.safetensors", "tensor '" + kL1 + "0.down_proj.weight'",
        "ends before it begins"}},
      {"offsets_negative", Stage::kOpen,
       {"offsets_negative/model.safetensors", "tensor '" + kL1 + "0.gate_proj.weight'",
        "'data_offsets' is [-16,0]"}},
      {"overlapping_tensors", Stage::kOpen,
       {"overlapping_tensors/model.safetensors", kL1 + "4.gate_proj.weight_scale'",
        kL1 + "4.up_proj.weight_scale'", "overlaps"}},
      {"unknown_dtype", Stage::kOpen,
       {"unknown_dtype/model.safetensors", "tensor '" + kL1 + "1.gate_proj.weight'", "'dtype' is 'Q4_K'"}},
      {"shape_overflow", Stage::kOpen,
       {"shape_overflow/model.safetensors", "tensor '" + kL1 + "1.down_proj.weight'", "'shape'", "overflows"}},
      {"index_missing_shard", Stage::kOpen,
       {"index_missing_shard/model.safetensors.index.json", "shard 'model-00002-of-00002.safetensors'",
        "missing"}},
      {"index_path_traversal", Stage::kOpen,
       {"index_path_traversal/model.safetensors.index.json", kL1 + "0.gate_proj.weight",
        "'../model-00001-of-00002.safetensors'", "no path separators"}},
      {"index_wrong_shard", Stage::kOpen,
       {"index_wrong_shard/model.safetensors.index.json", "tensor '" + kL1 + "7.down_proj.weight'",
        "model-00001-of-00002.safetensors, which does not hold it"}},
      {"config_bad_value", Stage::kOpen,
       {"config_bad_value/config.json", "key 'hidden_size' is \"128\"", "expected an integer"}},
      {"wrong_scale_dtype", Stage::kLoad,
       {"wrong_scale_dtype/model.safetensors", "tensor '" + kL1 + "3.gate_proj.weight_scale'",
        "dtype F32; expected U8 or F8_E8M0"}},
      {"wrong_weight_dtype", Stage::kLoad,
       {"wrong_weight_dtype/model.safetensors", "tensor '" + kL1 + "6.up_proj.weight'",
        "dtype I16; expected U8 or I8 or F4"}},
      {"missing_expert", Stage::kLoad,
       {"missing_expert", "tensor '" + kL1 + "5.gate_proj.weight'", "layer 1 expert 5", "is missing",
        "8 experts"}},
      {"scale_wrong_shape", Stage::kLoad,
       {"scale_wrong_shape/model.safetensors", "tensor '" + kL1 + "2.down_proj.weight_scale'",
        "shape [128, 2]; expected [H, I/32]", "[128, 4]"}},
      {"scale_0xff", Stage::kLoad,
       {"scale_0xff/model.safetensors", "tensor '" + kL1 + "3.up_proj.weight_scale'",
        "element [17, 2] = 0xFF is the E8M0 NaN"}},
      {"fused_scale_0xff", Stage::kLoad,
       {"fused_scale_0xff/model.safetensors", "tensor '" + kL1 + "w2_weight_scale'",
        "element [6, 100, 3] = 0xFF is the E8M0 NaN"}},
      {"nvfp4_scale_nan", Stage::kLoad,
       {"nvfp4_scale_nan/model.safetensors", "tensor '" + kL1 + "4.down_proj.weight_scale'",
        "element [9, 1] = 0x7F is an e4m3 NaN"}},
      {"fp8_shared_block_size_number", Stage::kLoad,
       {"fp8_shared_block_size_number/config.json: quantization_config.weight_block_size is 128",
        "tensor 'model.layers.1.mlp.shared_experts.gate_proj.weight_scale_inv'", "[block_n, block_k]",
        "--no-shared-expert"}},
      {"nvfp4_global_nan", Stage::kLoad,
       {"nvfp4_global_nan/model.safetensors", "tensor '" + kL1 + "1.up_proj.weight_scale_2'",
        "expected a finite weight_scale_2 > 0"}},
  };
  return kCases;
}

TEST(CheckpointBadFiles, EveryGeneratedCaseIsChecked) {
  std::set<std::string> generated, checked;
  for (const auto& name : testckpt::manifest().at("bad")) generated.insert(name.get<std::string>());
  for (const BadCase& c : bad_cases()) checked.insert(c.name);
  EXPECT_EQ(generated, checked);
}

void PrintTo(const BadCase& c, std::ostream* os) { *os << "bad/" << c.name; }

class CheckpointBadFile : public ::testing::TestWithParam<BadCase> {};

TEST_P(CheckpointBadFile, FailsWithAnErrorNamingFileTensorAndField) {
  const BadCase& c = GetParam();
  const std::string dir = testckpt::bad_dir(c.name);
  std::string message;
  Stage failed_at = Stage::kOpen;
  try {
    auto ck = Checkpoint::open(dir);
    failed_at = Stage::kLoad;
    load_checkpoint_layer(ck, 1);
    FAIL() << c.name << ": no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    message = e.message();
  }
  EXPECT_EQ(failed_at == Stage::kOpen ? "open" : "load", c.stage == Stage::kOpen ? "open" : "load")
      << c.name << ": " << message;
  for (const std::string& part : c.message_parts)
    EXPECT_NE(message.find(part), std::string::npos)
        << c.name << ": the error lacks \"" << part << "\"\n  error: " << message;
}

INSTANTIATE_TEST_SUITE_P(All, CheckpointBadFile, ::testing::ValuesIn(bad_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace moe_ep
