#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "checkpoint/json_excerpt.h"
#include "core/check.h"
#include "moe_ep/checkpoint.h"

namespace moe_ep {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr int64_t kMaxJsonFileBytes = int64_t{256} << 20;

std::string read_text(const fs::path& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  MOE_EP_CHECK(!ec, "{}: cannot read ({})", path.string(), ec.message());
  MOE_EP_CHECK(size <= static_cast<uintmax_t>(kMaxJsonFileBytes), "{}: {} bytes; expected at most {}",
               path.string(), size, kMaxJsonFileBytes);
  std::ifstream in(path, std::ios::binary);
  MOE_EP_CHECK(in.good(), "{}: cannot open", path.string());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// What is at `p`: "" for a regular file (symbolic links followed), "missing" when nothing is
// there, else what is there instead ("a directory", "a character device", "a symbolic link
// that cannot be followed (...)"), so that a wrong kind of file is reported as such.
std::string file_kind(const fs::path& p) {
  std::error_code ec;
  const fs::file_status link = fs::symlink_status(p, ec);
  if (ec || link.type() == fs::file_type::not_found) return "missing";
  const fs::file_status st = fs::status(p, ec);
  if (ec) return fmt::format("a symbolic link that cannot be followed ({})", ec.message());
  switch (st.type()) {
    case fs::file_type::regular: return "";
    case fs::file_type::directory: return "a directory";
    case fs::file_type::character: return "a character device";
    case fs::file_type::block: return "a block device";
    case fs::file_type::fifo: return "a named pipe";
    case fs::file_type::socket: return "a socket";
    default: return "not a regular file";
  }
}

// True when `p` (symbolic links resolved) lies inside the directory `dir`.
bool inside(const fs::path& p, const fs::path& dir) {
  std::error_code ec;
  const fs::path real = fs::canonical(p, ec);
  if (ec) return false;
  const fs::path real_dir = fs::canonical(dir, ec);
  if (ec) return false;
  const fs::path rel = real.lexically_relative(real_dir);
  return !rel.empty() && *rel.begin() != "..";
}

// weight_map of the index: tensor name -> shard file name (a plain name inside the directory).
std::map<std::string, std::string> read_index(const fs::path& index_path) {
  const std::string where = index_path.string();
  Json j;
  try {
    j = Json::parse(read_text(index_path));
  } catch (const Json::exception& e) {
    MOE_EP_FAIL(ErrorCode::kInvalidArgument, "{}: not valid JSON ({})", where, e.what());
  }
  const auto map = j.is_object() ? j.find("weight_map") : j.end();
  MOE_EP_CHECK(map != j.end() && map->is_object(),
               "{}: key 'weight_map' is missing or not an object; expected {{tensor: file}}", where);
  std::map<std::string, std::string> out;
  for (const auto& [name, file] : map->items()) {
    MOE_EP_CHECK(file.is_string(), "{}: weight_map['{}'] is {}; expected a file name", where, name,
                 checkpoint::json_excerpt(file));
    const std::string f = file.get<std::string>();
    MOE_EP_CHECK(!f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos &&
                     f.find('\\') == std::string::npos && f.find('\0') == std::string::npos,
                 "{}: weight_map['{}'] = '{}'; expected a file name inside the checkpoint "
                 "directory (no path separators)", where, name, f);
    out.emplace(name, f);
  }
  MOE_EP_CHECK(!out.empty(), "{}: weight_map is empty", where);
  return out;
}

}  // namespace

std::shared_ptr<const Checkpoint> Checkpoint::open(const std::string& path) {
  std::shared_ptr<Checkpoint> c(new Checkpoint());
  c->path_ = path;
  std::error_code ec;
  const fs::path root(path);
  const bool is_dir = fs::is_directory(root, ec);
  const std::string root_kind = is_dir ? "a directory" : file_kind(root);
  MOE_EP_CHECK(is_dir || root_kind.empty(), "checkpoint '{}' is {}; expected a directory or a "
               ".safetensors file", path, root_kind);
  const fs::path dir = is_dir ? root : root.parent_path();

  const fs::path config_path = dir / "config.json";
  const std::string config_kind = file_kind(config_path);
  MOE_EP_CHECK(config_kind.empty() || config_kind == "missing", "{} is {}; expected a JSON file",
               config_path.string(), config_kind);
  if (config_kind.empty()) c->config_ = parse_model_config(read_text(config_path), config_path.string());
  const std::string index_kind = is_dir ? file_kind(dir / kIndexName) : "missing";
  MOE_EP_CHECK(index_kind.empty() || index_kind == "missing", "{} is {}; expected a JSON file",
               (dir / kIndexName).string(), index_kind);
  const std::string single_kind = is_dir ? file_kind(dir / "model.safetensors") : "missing";
  MOE_EP_CHECK(single_kind.empty() || single_kind == "missing", "{} is {}; expected a safetensors "
               "file", (dir / "model.safetensors").string(), single_kind);

  std::map<std::string, std::string> weight_map;  // empty: every tensor of every file
  std::vector<fs::path> file_paths;
  if (!is_dir) {
    file_paths.push_back(root);
  } else if (index_kind.empty()) {
    weight_map = read_index(dir / kIndexName);
    std::vector<std::string> names;
    for (const auto& [tensor, file] : weight_map) names.push_back(file);
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    for (const std::string& n : names) {
      const std::string kind = file_kind(dir / n);
      MOE_EP_CHECK(kind.empty(), "{}: shard '{}' (named by the weight_map) {} in {}",
                   (dir / kIndexName).string(), n, kind == "missing" ? "is missing" : "is " + kind,
                   dir.string());
      // Plain names only (read_index); a symbolic link must not lead out of the directory either.
      MOE_EP_CHECK(inside(dir / n, dir), "{}: shard '{}' is a symbolic link to a file outside the "
                   "checkpoint directory {}; expected the shards inside it",
                   (dir / kIndexName).string(), n, dir.string());
      file_paths.push_back(dir / n);
    }
  } else if (single_kind.empty()) {
    file_paths.push_back(dir / "model.safetensors");
  } else {
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (entry.path().extension() != ".safetensors") continue;
      const std::string kind = file_kind(entry.path());
      MOE_EP_CHECK(kind.empty(), "checkpoint '{}': {} is {}; expected a safetensors file", path,
                   entry.path().string(), kind);
      file_paths.push_back(entry.path());
    }
    MOE_EP_CHECK(!ec, "checkpoint '{}': cannot list the directory ({})", path, ec.message());
    std::sort(file_paths.begin(), file_paths.end());
  }
  MOE_EP_CHECK(!file_paths.empty(), "checkpoint '{}' has no {}, model.safetensors or *.safetensors",
               path, kIndexName);

  for (const fs::path& p : file_paths) c->files_.push_back(SafetensorsFile::open(p.string()));

  std::map<std::string, const CheckpointTensor*> index;
  if (weight_map.empty()) {
    for (const auto& f : c->files_)
      for (const CheckpointTensor& t : f->tensors()) {
        auto [it, inserted] = index.emplace(t.name, &t);
        MOE_EP_CHECK(inserted, "checkpoint '{}': tensor '{}' is in both {} and {}", path, t.name,
                     *it->second->file, f->path());
      }
  } else {
    std::map<std::string, const SafetensorsFile*> shard_of_name;  // by file name
    for (const auto& f : c->files_) shard_of_name.emplace(fs::path(f->path()).filename().string(), f.get());
    for (const auto& [name, file] : weight_map) {
      const auto found = shard_of_name.find(file);
      MOE_EP_ASSERT(found != shard_of_name.end());
      const SafetensorsFile* shard = found->second;
      const CheckpointTensor* t = shard->find(name);
      MOE_EP_CHECK(t != nullptr, "{}: tensor '{}' is mapped to {}, which does not hold it",
                   (dir / kIndexName).string(), name, shard->path());
      index.emplace(name, t);
    }
  }
  c->index_.assign(index.begin(), index.end());
  for (size_t i = 0; i < c->files_.size(); ++i)
    for (const CheckpointTensor& t : c->files_[i]->tensors()) c->file_of_.emplace_back(&t, i);
  std::sort(c->file_of_.begin(), c->file_of_.end());
  return c;
}

int64_t Checkpoint::total_tensor_bytes() const {
  int64_t n = 0;
  for (const auto& [name, t] : index_) n += t->nbytes;
  return n;
}

std::vector<std::string> Checkpoint::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(index_.size());
  for (const auto& [name, t] : index_) names.push_back(name);
  return names;
}

const CheckpointTensor* Checkpoint::find(std::string_view name) const {
  auto it = std::lower_bound(index_.begin(), index_.end(), name,
                             [](const auto& entry, std::string_view n) { return entry.first < n; });
  if (it == index_.end() || it->first != name) return nullptr;
  return it->second;
}

const CheckpointTensor& Checkpoint::get(std::string_view name, std::string_view role) const {
  const CheckpointTensor* t = find(name);
  MOE_EP_CHECK(t != nullptr, "checkpoint '{}': tensor '{}' ({}) is missing", path_, name, role);
  return *t;
}

const SafetensorsFile& Checkpoint::file_of(const CheckpointTensor& tensor) const {
  auto it = std::lower_bound(file_of_.begin(), file_of_.end(), &tensor,
                             [](const auto& entry, const CheckpointTensor* t) { return entry.first < t; });
  MOE_EP_ASSERT(it != file_of_.end() && it->first == &tensor);
  return *files_[it->second];
}

}  // namespace moe_ep
