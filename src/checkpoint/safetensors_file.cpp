#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "checkpoint/checked_math.h"
#include "checkpoint/dtypes.h"
#include "checkpoint/json_excerpt.h"
#include "core/check.h"
#include "moe_ep/checkpoint.h"

namespace moe_ep {

using checkpoint::checked_add;
using checkpoint::checked_mul;
using checkpoint::json_excerpt;

namespace {

// The reference implementation refuses headers above 100 MB; so does this reader, before it
// allocates anything for one.
constexpr int64_t kMaxHeaderBytes = int64_t{100} << 20;
constexpr size_t kMaxDims = 8;

using Json = nlohmann::json;

#define ST_FAIL(...) MOE_EP_FAIL(ErrorCode::kInvalidArgument, __VA_ARGS__)

// A non-negative integer that fits int64 (JSON floats, negatives and huge values rejected).
std::optional<int64_t> as_index(const Json& j) {
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(v);
  }
  if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    if (v < 0) return std::nullopt;
    return v;
  }
  return std::nullopt;
}

// The first top-level name given twice, "" when none: a SAX pass that only looks at depth-1
// keys. (nlohmann's parse callback would do it too, but its end_object walks the whole parent
// object each time, which makes a header of n tensors cost O(n^2).)
class DuplicateKeyFinder : public nlohmann::json_sax<Json> {
 public:
  std::string duplicate;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return ++depth_, true; }
  bool end_object() override { return --depth_, true; }
  bool start_array(std::size_t) override { return ++depth_, true; }
  bool end_array() override { return --depth_, true; }
  bool key(string_t& k) override {
    if (depth_ == 1 && !seen_.insert(k).second && duplicate.empty()) duplicate = k;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;  // the DOM parse that follows reports it
  }

 private:
  int64_t depth_ = 0;
  std::set<std::string> seen_;
};

// Parses the header text, refusing duplicate top-level names (the JSON library would keep the
// last one silently).
Json parse_header(const std::string& path, const char* text, size_t n) {
  Json header;
  try {
    header = Json::parse(text, text + n);
  } catch (const Json::exception& e) {
    ST_FAIL("{}: header is not valid JSON ({})", path, e.what());
  }
  DuplicateKeyFinder finder;
  Json::sax_parse(text, text + n, &finder);
  if (!finder.duplicate.empty()) ST_FAIL("{}: header names tensor '{}' twice", path, finder.duplicate);
  if (!header.is_object())
    ST_FAIL("{}: header is {} ({}); expected a JSON object", path, header.type_name(),
            json_excerpt(header));
  return header;
}

CheckpointTensor parse_entry(const std::string& path, const std::string& name, const Json& entry,
                             int64_t data_start, int64_t data_size) {
  if (!entry.is_object())
    ST_FAIL("{}: tensor '{}': header entry is {}; expected an object with dtype, shape and "
            "data_offsets", path, name, json_excerpt(entry));
  for (const auto& [key, value] : entry.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      ST_FAIL("{}: tensor '{}': unknown field '{}'", path, name, key);
  CheckpointTensor t;
  t.name = name;

  const auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string())
    ST_FAIL("{}: tensor '{}': field 'dtype' is {}; expected a string", path, name,
            dtype == entry.end() ? std::string("missing") : json_excerpt(*dtype));
  t.dtype = dtype->get<std::string>();
  t.element_bits = checkpoint::safetensors_element_bits(t.dtype);
  if (t.element_bits == 0)
    ST_FAIL("{}: tensor '{}': field 'dtype' is '{}'; expected one of {}", path, name, t.dtype,
            checkpoint::known_safetensors_dtypes());

  const auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_array() || shape->size() > kMaxDims)
    ST_FAIL("{}: tensor '{}': field 'shape' is {}; expected an array of at most {} integers",
            path, name, shape == entry.end() ? std::string("missing") : json_excerpt(*shape),
            kMaxDims);
  int64_t numel = 1;
  for (const Json& d : *shape) {
    const std::optional<int64_t> v = as_index(d);
    if (!v) ST_FAIL("{}: tensor '{}': field 'shape' holds {}; expected integers >= 0", path, name,
                    json_excerpt(d));
    const std::optional<int64_t> n = checked_mul(numel, *v);
    if (!n) ST_FAIL("{}: tensor '{}': field 'shape' {} overflows a 64-bit element count", path,
                    name, json_excerpt(*shape));
    numel = *n;
    t.shape.push_back(*v);
  }
  const std::optional<int64_t> nbits = checked_mul(numel, t.element_bits);
  if (!nbits)
    ST_FAIL("{}: tensor '{}': shape {} of {} overflows a 64-bit byte count", path, name,
            json_excerpt(*shape), t.dtype);
  if (*nbits % 8 != 0)
    ST_FAIL("{}: tensor '{}': shape {} of {} is not a whole number of bytes", path, name,
            json_excerpt(*shape), t.dtype);
  const std::optional<int64_t> nbytes = *nbits / 8;

  const auto offsets = entry.find("data_offsets");
  std::optional<int64_t> begin, end;
  if (offsets != entry.end() && offsets->is_array() && offsets->size() == 2) {
    begin = as_index((*offsets)[0]);
    end = as_index((*offsets)[1]);
  }
  if (!begin || !end)
    ST_FAIL("{}: tensor '{}': field 'data_offsets' is {}; expected [begin, end], integers >= 0",
            path, name, offsets == entry.end() ? std::string("missing") : json_excerpt(*offsets));
  if (*begin > *end)
    ST_FAIL("{}: tensor '{}': field 'data_offsets' [{}, {}] ends before it begins", path, name,
            *begin, *end);
  if (*end > data_size)
    ST_FAIL("{}: tensor '{}': field 'data_offsets' [{}, {}] reaches past the data section of {} "
            "bytes (file truncated, or the header lies)", path, name, *begin, *end, data_size);
  if (*end - *begin != *nbytes)
    ST_FAIL("{}: tensor '{}': field 'data_offsets' [{}, {}] spans {} bytes; dtype {} shape {} "
            "needs {}", path, name, *begin, *end, *end - *begin, t.dtype, json_excerpt(*shape),
            *nbytes);
  t.offset = data_start + *begin;  // data_start + end <= file size: no overflow
  t.nbytes = *nbytes;
  return t;
}

}  // namespace

int64_t CheckpointTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // checked when the header was read
  return n;
}

std::string CheckpointTensor::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return s + "]";
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;

  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) ST_FAIL("{}: cannot open ({})", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    ST_FAIL("{}: not a regular file", path);
  }
  f->size_ = static_cast<int64_t>(st.st_size);
  if (f->size_ < 8) {
    ::close(fd);
    ST_FAIL("{}: file is {} bytes; a safetensors file starts with an 8-byte header length", path,
            f->size_);
  }
  f->fd_ = fd;  // kept for read(); closed by the destructor
  void* map = ::mmap(nullptr, static_cast<size_t>(f->size_), PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) ST_FAIL("{}: cannot map {} bytes ({})", path, f->size_, std::strerror(errno));
  f->map_ = static_cast<const uint8_t*>(map);

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | f->map_[i];
  if (header_len > static_cast<uint64_t>(f->size_ - 8))
    ST_FAIL("{}: header length {} (bytes [0, 8)) is beyond the file's {} bytes (file truncated, "
            "or not a safetensors file)", path, header_len, f->size_);
  if (header_len == 0 || header_len > static_cast<uint64_t>(kMaxHeaderBytes))
    ST_FAIL("{}: header length {} (bytes [0, 8)); expected 1..{}", path, header_len,
            kMaxHeaderBytes);
  f->header_size_ = static_cast<int64_t>(header_len);
  const int64_t data_start = 8 + f->header_size_;
  const int64_t data_size = f->size_ - data_start;

  const Json header =
      parse_header(path, reinterpret_cast<const char*>(f->map_ + 8), static_cast<size_t>(header_len));
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object())
        ST_FAIL("{}: '__metadata__' is {}; expected an object of strings", path, json_excerpt(entry));
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string())
          ST_FAIL("{}: '__metadata__' key '{}' is {}; expected a string", path, key,
                  json_excerpt(value));
        f->metadata_.emplace_back(key, value.get<std::string>());
      }
      continue;
    }
    f->tensors_.push_back(parse_entry(path, name, entry, data_start, data_size));
  }

  std::sort(f->tensors_.begin(), f->tensors_.end(),
            [](const CheckpointTensor& a, const CheckpointTensor& b) {
              return a.offset != b.offset ? a.offset < b.offset : a.nbytes < b.nbytes;
            });
  // Sorted by start: a tensor overlaps another iff it starts before the furthest end so far.
  const CheckpointTensor* furthest = nullptr;
  for (const CheckpointTensor& t : f->tensors_) {
    if (t.nbytes == 0) continue;
    if (furthest && t.offset < furthest->offset + furthest->nbytes)
      ST_FAIL("{}: tensor '{}' (bytes [{}, {})) overlaps tensor '{}' (bytes [{}, {}))", path,
              t.name, t.offset - data_start, t.offset - data_start + t.nbytes, furthest->name,
              furthest->offset - data_start, furthest->offset - data_start + furthest->nbytes);
    if (!furthest || t.offset + t.nbytes > furthest->offset + furthest->nbytes) furthest = &t;
  }
  for (size_t i = 0; i < f->tensors_.size(); ++i) {
    CheckpointTensor& t = f->tensors_[i];
    t.data = f->map_ + t.offset;
    t.file = &f->path_;
    f->by_name_.emplace_back(t.name, i);
  }
  std::sort(f->by_name_.begin(), f->by_name_.end());
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), static_cast<size_t>(size_));
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsFile::read(const CheckpointTensor& t, void* dst) const {
  auto* out = static_cast<uint8_t*>(dst);
  int64_t done = 0;
  while (done < t.nbytes) {
    const ssize_t n = ::pread(fd_, out + done, static_cast<size_t>(t.nbytes - done),
                              static_cast<off_t>(t.offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      ST_FAIL("{}: tensor '{}': reading bytes [{}, {}) failed at {} ({})", path_, t.name, t.offset,
              t.offset + t.nbytes, t.offset + done,
              n == 0 ? "end of file: the file shrank after it was opened" : std::strerror(errno));
    done += n;
  }
}

const CheckpointTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name,
                             [](const auto& entry, std::string_view n) { return entry.first < n; });
  if (it == by_name_.end() || it->first != name) return nullptr;
  return &tensors_[it->second];
}

void SafetensorsFile::prefetch(const CheckpointTensor& t) const {
  if (t.nbytes == 0) return;
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  const int64_t begin = t.offset / page * page;
  ::madvise(const_cast<uint8_t*>(map_) + begin, static_cast<size_t>(t.offset + t.nbytes - begin),
            MADV_WILLNEED);
}

}  // namespace moe_ep
