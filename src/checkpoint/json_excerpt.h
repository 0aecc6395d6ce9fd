// A short, bounded excerpt of a JSON value read from an untrusted file, for error messages.
// Unlike nlohmann's dump() it never recurses (a header nested 100,000 deep must not exhaust the
// stack while its error is being written) and never throws (invalid UTF-8 is replaced).
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace moe_ep::checkpoint {

// At most max_chars characters of the value's compact JSON text; "..." ends a cut excerpt.
std::string json_excerpt(const nlohmann::json& j, size_t max_chars = 60);

}  // namespace moe_ep::checkpoint
