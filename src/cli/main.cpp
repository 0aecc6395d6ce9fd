#include <fmt/format.h>

#include "moe_ep/moe_ep.h"

int main() {
  fmt::print("moe_ep backends: {}\n", moe_ep::backend_names());
  return 0;
}
