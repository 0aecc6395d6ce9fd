#include "core/test_formats_vector_file.h"

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace moe_ep::testvectors {
namespace {

constexpr const char* kHowToMake =
    "the vectors are written by tests/python/gen_format_vectors.py, which ctest runs as the "
    "fixture 'format_vectors' (it needs `python3 -m pip install -r tests/python/requirements.txt`);"
    " to run the test binary by hand: python3 tests/python/gen_format_vectors.py DIR/formats and "
    "MOE_EP_TEST_DATA=DIR";

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error(fmt::format("{}; {}", what, kHowToMake));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(fmt::format("missing format test vector file '{}'", path));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The value of 'key': in the header dict, up to the next ',' or ')' closing it.
std::string header_field(const std::string& header, const std::string& key,
                         const std::string& path) {
  const std::string quoted = "'" + key + "':";
  const size_t at = header.find(quoted);
  if (at == std::string::npos) fail(fmt::format("'{}' has no '{}' in its npy header", path, key));
  size_t begin = header.find_first_not_of(' ', at + quoted.size());
  size_t end = header[begin] == '(' ? header.find(')', begin) + 1 : header.find(',', begin);
  return header.substr(begin, end - begin);
}

}  // namespace

const std::vector<std::string>& checked_cases() {
  static const std::vector<std::string> kCases = [] {
    std::vector<std::string> cases = {"e4m3_decode", "e2m1_decode", "e8m0_decode", "bf16_decode"};
    for (const char* format : {"e4m3", "e2m1", "bf16"})
      for (const char* category : {"random", "bits", "ties", "subnormal", "saturation", "special"})
        cases.push_back(fmt::format("{}_encode_{}", format, category));
    for (const char* name :
         {"e2m1_encode_nan", "ceil_log2", "q8_scale_byte", "q8_quantize_random",
          "q8_quantize_structured", "q8_dequantize", "mxfp4_scale_byte", "mxfp4_quantize_random",
          "mxfp4_quantize_structured", "mxfp4_dequantize", "nvfp4_global_encode",
          "nvfp4_quantize_random", "nvfp4_quantize_structured", "nvfp4_quantize_saturating",
          "nvfp4_rows", "nvfp4_dequantize"})
      cases.push_back(name);
    return cases;
  }();
  return kCases;
}

std::vector<std::string> checked_cases_starting_with(const std::string& prefix) {
  std::vector<std::string> out;
  for (const std::string& c : checked_cases())
    if (c.compare(0, prefix.size(), prefix) == 0) out.push_back(c);
  return out;
}

std::string vector_dir() {
  const char* root = std::getenv("MOE_EP_TEST_DATA");
  if (root == nullptr || *root == '\0') fail("MOE_EP_TEST_DATA is not set");
  return std::string(root) + "/formats";
}

std::vector<std::string> manifest_cases() {
  const std::string path = vector_dir() + "/manifest.txt";
  const std::string text = read_file(path);
  std::vector<std::string> cases;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    if (!line.empty() && line[0] != '#') cases.push_back(line);
    begin = end + 1;
  }
  return cases;
}

int64_t NpyArray::size() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// .npy: "\x93NUMPY", major, minor, header length (u16 for 1.x, u32 for 2.x/3.x, little-endian),
// an ASCII Python dict {'descr': ..., 'fortran_order': ..., 'shape': (...), }, then the data.
NpyArray read_npy(const std::string& path) {
  const std::string file = read_file(path);
  if (file.size() < 10 || file.compare(0, 6, "\x93NUMPY") != 0)
    fail(fmt::format("'{}' is not an .npy file", path));
  const int major = static_cast<uint8_t>(file[6]);
  auto byte = [&](size_t i) { return static_cast<size_t>(static_cast<uint8_t>(file[i])); };
  size_t header_len = 0, header_at = 0;
  if (major == 1) {
    header_len = byte(8) | byte(9) << 8;
    header_at = 10;
  } else {
    if (file.size() < 12) fail(fmt::format("'{}' is truncated", path));
    header_len = byte(8) | byte(9) << 8 | byte(10) << 16 | byte(11) << 24;
    header_at = 12;
  }
  if (header_at + header_len > file.size()) fail(fmt::format("'{}' is truncated", path));
  const std::string header = file.substr(header_at, header_len);

  NpyArray a;
  a.path = path;
  a.descr = header_field(header, "descr", path);
  if (a.descr.size() < 2) fail(fmt::format("'{}' has a bad descr {}", path, a.descr));
  a.descr = a.descr.substr(1, a.descr.size() - 2);  // strip the quotes
  if (header_field(header, "fortran_order", path) != "False")
    fail(fmt::format("'{}' is not in C order", path));
  const std::string shape = header_field(header, "shape", path);  // "(a, b)" or "(a,)" or "()"
  size_t pos = 1;
  while (pos < shape.size()) {
    const size_t next = shape.find_first_of(",)", pos);
    const std::string dim = shape.substr(pos, next - pos);
    if (dim.find_first_not_of(' ') != std::string::npos) a.shape.push_back(std::stoll(dim));
    pos = next + 1;
  }
  const int64_t item = a.descr.empty() ? 0 : std::stoll(a.descr.substr(2));
  const size_t data_at = header_at + header_len;
  const size_t num_bytes = static_cast<size_t>(a.size() * item);
  if (file.size() != data_at + num_bytes)
    fail(fmt::format("'{}' holds {} data bytes, its header promises {}", path,
                     file.size() - data_at, num_bytes));
  a.bytes.assign(file.begin() + static_cast<std::ptrdiff_t>(data_at), file.end());
  return a;
}

std::vector<int64_t> shape_of(const std::string& case_name, const std::string& array) {
  return read_npy(fmt::format("{}/{}.{}.npy", vector_dir(), case_name, array)).shape;
}

}  // namespace moe_ep::testvectors
