// Hostile checkpoint files written by the test itself: nesting deep enough to exhaust a
// recursive printer's stack, many tensors, files of the wrong kind behind the expected names,
// symbolic links out of the directory or into a loop, and config.json values that would size
// an allocation beyond the host or overflow the output. Each must end in a moe_ep::Error that
// names the file, key or tensor; none may crash, hang or allocate without bound.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/tensor_pattern.h"
#include "moe_ep/checkpoint.h"
#include "moe_ep/error.h"

namespace moe_ep {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the system's temporary directory, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "moe_ep_hostile_XXXXXX").string();
    path_ = ::mkdtemp(templ.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f << bytes;
  ASSERT_TRUE(f.good()) << p;
}

// A safetensors file: the 8-byte little-endian header length, the header, the data.
std::string safetensors(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

std::string nested_array(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// Runs `f`, which must throw moe_ep::Error with `code` and every one of `parts` in its message.
template <class F>
void expect_error(F&& f, ErrorCode code, const std::vector<std::string>& parts, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << what << ": no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << what << ": " << e.message();
    for (const std::string& p : parts)
      EXPECT_NE(e.message().find(p), std::string::npos) << what << ": '" << p << "' not in: " << e.message();
    EXPECT_LT(e.message().size(), 2000u) << what << ": the message quotes the whole input";
  }
}

constexpr int kDeep = 100000;  // beyond the ~70,000 levels that crashed a recursive printer

TEST(HostileFiles, DeepNestingEndsInAShortErrorWhereverItSits) {
  struct Case {
    const char* where;
    std::string header;
    std::vector<std::string> parts;
  };
  const std::string deep = nested_array(kDeep);
  const std::vector<Case> cases = {
      {"the header itself", deep, {"header is array", "[[[", "..."}},
      {"a tensor entry", R"({"a":)" + deep + "}", {"tensor 'a'", "header entry is [[[", "..."}},
      {"shape", R"({"a":{"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,0]}})",
       {"tensor 'a'", "field 'shape'", "[[[", "..."}},
      {"a shape element", R"({"a":{"dtype":"F32","shape":[)" + deep + R"(],"data_offsets":[0,0]}})",
       {"tensor 'a'", "field 'shape' holds [[[", "..."}},
      {"data_offsets", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":)" + deep + "}}",
       {"tensor 'a'", "field 'data_offsets' is [[[", "..."}},
      {"__metadata__", R"({"__metadata__":)" + deep + "}", {"'__metadata__' is [[[", "..."}},
      {"a __metadata__ value", R"({"__metadata__":{"k":)" + deep + "}}",
       {"'__metadata__' key 'k' is [[[", "..."}},
  };
  TempDir dir;
  for (const Case& c : cases) {
    const fs::path file = dir.path() / "deep.safetensors";
    write_file(file, safetensors(c.header));
    expect_error([&] { SafetensorsFile::open(file.string()); }, ErrorCode::kInvalidArgument, c.parts,
                 std::string("nesting in ") + c.where);
  }
}

TEST(HostileFiles, DeepNestingInJsonFilesEndsInAShortError) {
  const std::string deep = nested_array(kDeep);
  expect_error([&] { parse_model_config(R"({"hidden_size":)" + deep + "}", "config.json"); },
               ErrorCode::kInvalidArgument, {"config.json", "'hidden_size'", "[[[", "..."}, "config.json");
  TempDir dir;
  write_file(dir.path() / "model.safetensors.index.json", R"({"weight_map":{"a":)" + deep + "}}");
  expect_error([&] { Checkpoint::open(dir.path().string()); }, ErrorCode::kInvalidArgument,
               {"model.safetensors.index.json", "weight_map['a']", "[[[", "..."}, "index");
}

// Many tiny tensors: opening, listing and the MoE-layer scan grow linearly with their count
// (real checkpoints hold ~100,000 tensors across shards).
TEST(HostileFiles, ManyTensorsScanInLinearTime) {
  auto scan_seconds = [](int n) {
    TempDir dir;
    std::string header = "{";
    for (int i = 0; i < n; ++i)
      header += (i ? "," : "") + std::string("\"model.layers.") + std::to_string(i % 61) +
                ".extra." + std::to_string(i) + R"(.weight":{"dtype":"U8","shape":[1],"data_offsets":[)" +
                std::to_string(i) + "," + std::to_string(i + 1) + "]}";
    header += "}";
    write_file(dir.path() / "model.safetensors", safetensors(header, std::string(n, '\1')));
    const auto start = std::chrono::steady_clock::now();
    auto ck = Checkpoint::open(dir.path().string());
    EXPECT_EQ(ck->tensor_names().size(), static_cast<size_t>(n));
    EXPECT_TRUE(find_moe_layers(*ck, LayerLoadOptions{}).empty());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const double small = scan_seconds(20000), large = scan_seconds(80000);
  // Linear: 4x the tensors in about 4x the time; quadratic would be 16x. The floor absorbs noise
  // of a loaded machine on the small run.
  EXPECT_LT(large, 8.0 * std::max(small, 0.05)) << "20,000 tensors: " << small << " s; 80,000: " << large << " s";
  EXPECT_LT(large, 20.0) << "80,000 tensors scanned in " << large << " s";
}

TEST(HostileFiles, WrongKindsOfFileAreNamedNotReportedMissing) {
  struct Case {
    const char* what;
    std::function<void(const fs::path&)> make;
    std::vector<std::string> parts;
  };
  const std::string tiny = safetensors(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x");
  const std::vector<Case> cases = {
      {"config.json is a directory",
       [&](const fs::path& d) {
         fs::create_directory(d / "config.json");
         write_file(d / "model.safetensors", tiny);
       },
       {"config.json is a directory"}},
      {"model.safetensors links to /dev/zero",
       [](const fs::path& d) { fs::create_symlink("/dev/zero", d / "model.safetensors"); },
       {"model.safetensors is a character device"}},
      {"model.safetensors is a symbolic link loop",
       [](const fs::path& d) {
         fs::create_symlink(d / "b.safetensors", d / "model.safetensors");
         fs::create_symlink(d / "model.safetensors", d / "b.safetensors");
       },
       {"model.safetensors is a symbolic link that cannot be followed"}},
      {"the index is a directory",
       [](const fs::path& d) { fs::create_directory(d / "model.safetensors.index.json"); },
       {"model.safetensors.index.json is a directory"}},
      {"an index shard links outside the directory",
       [&](const fs::path& d) {
         fs::create_directory(d / "inner");
         write_file(d / "outside.safetensors", tiny);
         fs::create_symlink(d / "outside.safetensors", d / "inner" / "shard.safetensors");
         write_file(d / "inner" / "model.safetensors.index.json", R"({"weight_map":{"a":"shard.safetensors"}})");
       },
       {"shard 'shard.safetensors'", "outside the checkpoint directory"}},
      {"an index shard is a directory",
       [&](const fs::path& d) {
         fs::create_directory(d / "shard.safetensors");
         write_file(d / "model.safetensors.index.json", R"({"weight_map":{"a":"shard.safetensors"}})");
       },
       {"shard 'shard.safetensors'", "is a directory"}},
  };
  for (const Case& c : cases) {
    TempDir dir;
    c.make(dir.path());
    const fs::path root = fs::exists(dir.path() / "inner") ? dir.path() / "inner" : dir.path();
    expect_error([&] { Checkpoint::open(root.string()); }, ErrorCode::kInvalidArgument, c.parts, c.what);
  }
}

// A shard inside the directory, reached through a symbolic link that stays inside, is fine.
TEST(HostileFiles, ShardLinkInsideTheDirectoryIsFollowed) {
  TempDir dir;
  write_file(dir.path() / "real.safetensors",
             safetensors(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x"));
  fs::create_symlink("real.safetensors", dir.path() / "shard.safetensors");
  write_file(dir.path() / "model.safetensors.index.json", R"({"weight_map":{"a":"shard.safetensors"}})");
  EXPECT_EQ(Checkpoint::open(dir.path().string())->tensor_names().size(), 1u);
}

TEST(HostileFiles, ConfigValuesThatWouldOverflowAreRefusedNamingTheKey) {
  const std::string base = R"("hidden_size":64,"moe_intermediate_size":32,"n_routed_experts":8,"num_experts_per_tok":2)";
  for (const char* v : {"1e300", "1e39", "2048", "0", "-1"})
    expect_error([&] { parse_model_config("{" + base + R"(,"routed_scaling_factor":)" + v + "}", "cfg.json"); },
                 ErrorCode::kInvalidArgument, {"cfg.json", "'routed_scaling_factor'", "expected a number in (0, 1024]"},
                 std::string("routed_scaling_factor ") + v);
  expect_error([&] { parse_model_config("{" + base + R"(,"swiglu_limit":1e300})", "cfg.json"); },
               ErrorCode::kInvalidArgument, {"'swiglu_limit'"}, "swiglu_limit 1e300");
  EXPECT_FLOAT_EQ(parse_model_config("{" + base + R"(,"routed_scaling_factor":2.5})", "c").routed_scaling_factor, 2.5f);
}

// n_routed_experts of 10^9 would size the expert table and weight buffers at tens of GB: the
// loader refuses it against the host budget before allocating, naming the key and the file.
TEST(HostileFiles, ExpertCountBeyondTheHostIsRefusedBeforeAllocating) {
  TempDir dir;
  write_file(dir.path() / "config.json",
             R"({"hidden_size":64,"moe_intermediate_size":32,"n_routed_experts":1000000000,"num_experts_per_tok":2})");
  write_file(dir.path() / "model.safetensors",
             safetensors(R"({"model.layers.0.mlp.experts.0.gate_proj.weight":{"dtype":"U8","shape":[32,32],"data_offsets":[0,1024]}})",
                         std::string(1024, '\0')));
  ::setenv("MOE_EP_HOST_MEMORY_LIMIT", "4000000000", 1);
  expect_error([&] { load_checkpoint_layer(Checkpoint::open(dir.path().string()), 0, {}); },
               ErrorCode::kUnsupported, {"n_routed_experts = 1000000000", "config.json", "host memory"},
               "n_routed_experts 1e9");
  ::unsetenv("MOE_EP_HOST_MEMORY_LIMIT");
}

TEST(HostileFiles, RepeatedProjectionNamesAreRefused) {
  using checkpoint::TensorPattern;
  const std::string per = TensorPattern::per_expert_default().text;
  expect_error([&] { TensorPattern::parse(per, {"gate_proj", "gate_proj", "gate_proj"}, "--proj-names"); },
               ErrorCode::kInvalidArgument, {"--proj-names", "'gate_proj' is given twice"}, "gate x3");
  expect_error([&] { TensorPattern::parse(per, {"gate_proj", "up_proj", "gate_proj"}, "--proj-names"); },
               ErrorCode::kInvalidArgument, {"'gate_proj' is given twice (as gate and down)"}, "gate as down");
  expect_error([&] { TensorPattern::parse(TensorPattern::fused_default().text, {"w13", "w13"}, "--proj-names"); },
               ErrorCode::kInvalidArgument, {"'w13' is given twice"}, "fused");
  expect_error([&] { TensorPattern::parse(per, {"gate_proj", "", "down_proj"}, "--proj-names"); },
               ErrorCode::kInvalidArgument, {"projection name 1 is empty"}, "empty");
  EXPECT_NO_THROW(TensorPattern::parse(per, {"w1", "w3", "w2"}, "--proj-names"));
}

}  // namespace
}  // namespace moe_ep
