// docs/kernels.md carries the form table as sm90_form_table_markdown() prints it, between its
// kernel-table markers. MOE_EP_UPDATE_DOCS=1 rewrites that region instead of comparing.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "cuda/policy/sm90_forms.h"

namespace moe_ep::cuda {
namespace {

constexpr const char* kBegin = "<!-- kernel-table:begin -->\n";
constexpr const char* kEnd = "<!-- kernel-table:end -->";

TEST(Sm90FormsDoc, KernelsMdCarriesTheFormTable) {
  const std::string path = std::string(MOE_EP_SOURCE_DIR) + "/docs/kernels.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot read " << path;
  std::stringstream text;
  text << in.rdbuf();
  std::string doc = text.str();
  const size_t begin = doc.find(kBegin), end = doc.find(kEnd);
  ASSERT_NE(begin, std::string::npos) << path << " has no " << kBegin;
  ASSERT_NE(end, std::string::npos) << path << " has no " << kEnd;
  ASSERT_LT(begin, end);
  const size_t from = begin + std::string(kBegin).size();
  const std::string table = sm90_form_table_markdown();
  if (const char* update = std::getenv("MOE_EP_UPDATE_DOCS"); update != nullptr && std::string(update) == "1") {
    doc.replace(from, end - from, table);
    std::ofstream(path) << doc;
    GTEST_SKIP() << "rewrote the form table of " << path;
  }
  EXPECT_EQ(doc.substr(from, end - from), table)
      << path << " is out of date with src/cuda/policy/sm90_forms.cpp; regenerate it with "
      << "MOE_EP_UPDATE_DOCS=1 moe_ep_tests --gtest_filter=Sm90FormsDoc.*";
}

}  // namespace
}  // namespace moe_ep::cuda
