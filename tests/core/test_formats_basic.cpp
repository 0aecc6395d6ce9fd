#include <gtest/gtest.h>

#include "moe_ep/formats.h"

namespace moe_ep {
namespace {

TEST(Formats, E2M1TiesToEven) {
  EXPECT_EQ(float_to_e2m1(0.75f), 2);  // 0.5 (code 1) vs 1.0 (code 2): even code wins
  EXPECT_EQ(float_to_e2m1(1.75f), 4);
  EXPECT_EQ(float_to_e2m1(5.0f), 6);
  EXPECT_EQ(float_to_e2m1(100.0f), 7);
}

}  // namespace
}  // namespace moe_ep
