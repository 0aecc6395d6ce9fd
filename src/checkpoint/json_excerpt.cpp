#include "checkpoint/json_excerpt.h"

#include <vector>

namespace moe_ep::checkpoint {
namespace {

using Json = nlohmann::json;

std::string scalar_text(const Json& j) {
  try {
    return j.dump(-1, ' ', false, Json::error_handler_t::replace);
  } catch (...) {
    return "<unprintable>";
  }
}

}  // namespace

std::string json_excerpt(const Json& j, size_t max_chars) {
  // Depth-first walk with an explicit stack; it stops as soon as the text is long enough, so
  // its work and memory are bounded by max_chars, not by the size or depth of the value.
  struct Frame {
    const Json* value;
    Json::const_iterator next;
  };
  const size_t limit = max_chars + 1;  // one character past the limit tells "cut"
  std::string out;
  std::vector<Frame> stack;
  auto open = [&](const Json& v) {
    if (v.is_object() || v.is_array()) {
      out += v.is_object() ? '{' : '[';
      stack.push_back({&v, v.cbegin()});
    } else {
      out += scalar_text(v);
    }
  };
  open(j);
  while (!stack.empty() && out.size() < limit) {
    Frame& f = stack.back();
    if (f.next == f.value->cend()) {
      out += f.value->is_object() ? '}' : ']';
      stack.pop_back();
      continue;
    }
    if (f.next != f.value->cbegin()) out += ',';
    const Json::const_iterator it = f.next++;
    if (f.value->is_object()) out += scalar_text(Json(it.key())) + ':';
    open(*it);  // may push: f is not used after this
  }
  if (out.size() > max_chars) out = out.substr(0, max_chars - 3) + "...";
  return out;
}

}  // namespace moe_ep::checkpoint
