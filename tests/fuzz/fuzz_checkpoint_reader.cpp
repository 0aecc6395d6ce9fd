// libFuzzer target: the safetensors checkpoint reader (include/moe_ep/checkpoint.h), the main
// untrusted-input surface (docs/spec.md §11).
//
// Input: byte 0 picks the case; the rest is
//   even: one .safetensors file, opened with SafetensorsFile::open
//   odd:  a checkpoint directory, parts separated by "\n##\n": config.json, then
//         model.safetensors.index.json (an empty part: no index, the shard is model.safetensors),
//         then the shard model-00001.safetensors; opened with Checkpoint::open, then
//         find_moe_layers and load_checkpoint_layer of the first MoE layer it names.
// Findings, besides sanitizer reports: an exception that is not a moe_ep::Error of
// kInvalidArgument / kUnsupported, a tensor whose recorded bytes leave the file or disagree with
// its dtype and shape, and read() returning other bytes than the mapping holds.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "moe_ep/checkpoint.h"
#include "moe_ep/error.h"

namespace moe_ep::fuzz {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_checkpoint_reader finding: %s\n", what.c_str());
  std::abort();
}

const fs::path& work_dir() {
  static const fs::path dir = fs::temp_directory_path() / ("moe_ep_fuzz_checkpoint_" + std::to_string(getpid()));
  return dir;
}

void write_file(const fs::path& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f.good()) finding("cannot write " + path.string());
}

void check_file(const SafetensorsFile& file) {
  for (const CheckpointTensor& t : file.tensors()) {
    if (t.offset < file.header_size() + 8 || t.nbytes < 0 || t.offset > file.file_size() - t.nbytes)
      finding("tensor '" + t.name + "' lies outside the file's data");
    if (t.element_bits <= 0 || (t.numel() * t.element_bits + 7) / 8 != t.nbytes)
      finding("tensor '" + t.name + "': nbytes disagrees with dtype and shape");
    std::vector<uint8_t> copy(static_cast<size_t>(t.nbytes));
    file.read(t, copy.data());
    if (t.nbytes > 0 && std::memcmp(copy.data(), t.data, copy.size()) != 0)
      finding("tensor '" + t.name + "': read() differs from the mapping");
  }
}

void run_file(std::string_view bytes) {
  const fs::path path = work_dir() / "model.safetensors";
  write_file(path, bytes);
  check_file(*SafetensorsFile::open(path.string()));
}

void run_directory(std::string_view bytes) {
  constexpr std::string_view kSep = "\n##\n";
  std::vector<std::string_view> parts;
  while (parts.size() < 2) {
    const size_t at = bytes.find(kSep);
    if (at == std::string_view::npos) break;
    parts.push_back(bytes.substr(0, at));
    bytes.remove_prefix(at + kSep.size());
  }
  parts.push_back(bytes);
  const fs::path dir = work_dir() / "ckpt";
  fs::create_directories(dir);
  write_file(dir / "config.json", parts[0]);
  const bool indexed = parts.size() == 3 && !parts[1].empty();
  if (indexed) write_file(dir / "model.safetensors.index.json", parts[1]);
  write_file(dir / (indexed ? "model-00001.safetensors" : "model.safetensors"), parts.back());
  const std::shared_ptr<const Checkpoint> ck = Checkpoint::open(dir.string());
  for (const auto& f : ck->files()) check_file(*f);
  LayerLoadOptions options;
  options.num_threads = 1;
  const std::vector<int64_t> layers = find_moe_layers(*ck, options);
  if (layers.empty()) return;
  const std::unique_ptr<CheckpointLayer> layer = load_checkpoint_layer(ck, layers.front(), options);
  if (layer->pack_bytes() < 0) finding("negative pack bytes");
}

int run(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  fs::remove_all(work_dir());
  fs::create_directories(work_dir());
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  static const bool verbose = std::getenv("MOE_EP_FUZZ_VERBOSE") != nullptr;  // outcome per input
  try {
    if (data[0] % 2 == 0) run_file(bytes);
    else run_directory(bytes);
    if (verbose) std::fprintf(stderr, "accepted\n");
  } catch (const Error& e) {
    if (verbose) std::fprintf(stderr, "refused: %s\n", e.what());
    if (e.code() != ErrorCode::kInvalidArgument && e.code() != ErrorCode::kUnsupported)
      finding(std::string("unexpected error code: ") + e.what());
  } catch (const std::exception& e) {
    finding(std::string("an exception that is not a moe_ep::Error: ") + e.what());
  }
  return 0;
}

}  // namespace
}  // namespace moe_ep::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return moe_ep::fuzz::run(data, size);
}
