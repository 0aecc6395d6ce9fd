// `moe_ep inspect` and `moe_ep run/bench --checkpoint` on the generated checkpoints, as a user
// runs them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_test_data.h"
#include "cli/cli_runner.h"
#include "moe_ep/checkpoint.h"

namespace moe_ep::test {
namespace {

TEST(CheckpointCli, InspectReportsLayersShapesAndTheFp8Window) {
  const CliResult r = run_cli("inspect " + testckpt::checkpoint_dir("heavy_tailed") + " --json");
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const nlohmann::json j = parse_json(r);
  EXPECT_EQ(j["moe_layers"], nlohmann::json::array({1}));
  EXPECT_EQ(j["config"]["E"], 8);
  EXPECT_EQ(j["config"]["K"], 2);
  ASSERT_EQ(j["layers"].size(), 1u);
  const auto& layer = j["layers"][0];
  EXPECT_EQ(layer["format"], "mxfp4");
  EXPECT_EQ(layer["layout"], "per-expert");
  const auto& want = testckpt::manifest()["heavy_tailed_window"];
  const auto& w = layer["fp8_window"];
  EXPECT_EQ(w["rows_inside"], want["w13_rows_inside"].get<int64_t>() + want["w2_rows_inside"].get<int64_t>());
  EXPECT_EQ(w["rows_outside"], want["w13_rows"].get<int64_t>() - want["w13_rows_inside"].get<int64_t>());
  EXPECT_EQ(w["max_row_span"], want["max_row_span"]);
  EXPECT_EQ(j["span_histogram"], want["span_histogram"]);
  EXPECT_GT(j["load_gbps"].get<double>(), 0.0);
}

TEST(CheckpointCli, InspectTextNamesTheLayersAndTheHistogram) {
  const CliResult r = run_cli("inspect " + testckpt::checkpoint_dir("mxfp4_fused_sharded"));
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("files: 3"), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("MoE layers found: 2 (1, 2)"), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("3072/3072"), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("per-row block-exponent span"), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("GB/s"), std::string::npos) << describe(r);
}

TEST(CheckpointCli, InspectOfABadFileIsAUsageErrorNamingTheTensor) {
  const CliResult r = run_cli("inspect " + testckpt::bad_dir("scale_0xff"));
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("model.layers.1.mlp.experts.3.up_proj.weight_scale"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("0xFF"), std::string::npos) << describe(r);
}

TEST(CheckpointCli, RunARealLayerPassesTheUsualChecks) {
  for (const std::string& args :
       {"--checkpoint " + testckpt::checkpoint_dir("mxfp4_per_expert") + " --layer 2",
        "--checkpoint " + testckpt::checkpoint_dir("nvfp4_per_expert_sharded"),
        "--checkpoint " + testckpt::checkpoint_dir("heavy_tailed") + " --backend nvfp4",
        "--checkpoint " + testckpt::checkpoint_dir("pattern_no_config") +
            " --tensor-pattern 'model.layers.{L}.block_sparse_moe.experts.{e}.{proj}.weight'"
            " --proj-names w1,w3,w2 --top-k 2"}) {
    const CliResult r = run_cli("run --device cpu -T 40 --json " + args);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    const nlohmann::json j = parse_json(r);
    EXPECT_EQ(j["check_passed"], true) << describe(r);
    EXPECT_EQ(j["E"], 8);
    EXPECT_EQ(j["H"], 128);
    EXPECT_EQ(j["K"], 2);
    ASSERT_TRUE(j.contains("checkpoint")) << describe(r);
    EXPECT_GT(j["checkpoint"]["checkpoint_bytes"].get<int64_t>(), 0);
    // The layer's shared expert runs inside it, checked with the rest against the CPU layer.
    EXPECT_EQ(j["Is"], j["checkpoint"]["shared_intermediate"]) << describe(r);
    if (j["Is"].get<int64_t>() > 0)
      EXPECT_NE(j.value("sanity", "").find("every token nonzero"), std::string::npos) << describe(r);
  }
}

TEST(CheckpointCli, RunRefusesWhatItCannotDo) {
  const std::string ck = "--checkpoint " + testckpt::checkpoint_dir("nvfp4_fused");
  CliResult r = run_cli("run --device cpu " + ck + " --backend mxfp4");
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("--weights nvfp4 is not accepted by recipe 'mxfp4'"), std::string::npos) << describe(r);
  r = run_cli("run --device cpu " + ck + " --weights bf16");
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("the weights are the checkpoint's (nvfp4)"), std::string::npos) << describe(r);
  r = run_cli("run --device cpu " + ck + " --ranks 2");
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("--checkpoint runs one layer on one rank"), std::string::npos) << describe(r);
  // The layer's own shapes go through the synthetic problem's checks, flags named as there.
  r = run_cli("run --device cpu " + ck + " --activation-clamp -1");
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("--activation-clamp -1: activation_clamp = -1 is invalid"), std::string::npos)
      << describe(r);
  r = run_cli("run --device cpu " + ck + " -T 300 --max-tokens-per-rank 200");
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("--tokens 300 is above max_tokens_per_rank = 200"), std::string::npos) << describe(r);
  r = run_cli("run --device cpu --checkpoint " + testckpt::checkpoint_dir("mxfp4_per_expert") + " --layer 0");
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("no routed-expert weights"), std::string::npos) << describe(r);
}

TEST(CheckpointCli, BenchRunsARealLayer) {
  const CliResult r = run_cli("bench --device cpu -T 1,16 --iters 1 --warmup 0 --bandwidth-gbps 10 "
                              "--compute-tflops 1 --json --checkpoint " +
                              testckpt::checkpoint_dir("mxfp4_fused_sharded") + " --layer 1");
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const nlohmann::json j = parse_json(r);
  EXPECT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["checkpoint"]["layout"], "fused");
}

// Finding no MoE layer is a failure that shows what the checkpoint holds and what is known.
TEST(CheckpointCli, InspectWithoutMoeLayersFailsListingExpertTensorsAndLayouts) {
  const std::string dir = testckpt::checkpoint_dir("pattern_no_config");
  CliResult r = run_cli("inspect " + dir);
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  for (const char* part : {"no MoE layer found", "model.layers.1.block_sparse_moe.experts.0.w1.weight U8 [128, 64]",
                           "and 23 more like model.layers.N.block_sparse_moe.experts.N.wN.weight",
                           "deepseek-v4", "layers.{L}.ffn.experts.{e}.{proj}.weight", "transformers", "gpt-oss"})
    EXPECT_NE(r.err.find(part), std::string::npos) << part << "\n" << describe(r);
  r = run_cli("inspect --json " + dir);
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  const nlohmann::json j = parse_json(r);
  EXPECT_TRUE(j["moe_layers"].empty());
  EXPECT_EQ(j["expert_like_tensors"][0]["dtype"], "U8");
  EXPECT_EQ(j["expert_like_tensors"][0]["count"], 24);
  EXPECT_EQ(j["known_layouts"].size(), known_checkpoint_layouts().size());
  // The tensor pattern finds them.
  r = run_cli("inspect " + dir + " --tensor-pattern 'model.layers.{L}.block_sparse_moe.experts.{e}.{proj}.weight' "
              "--proj-names w1,w3,w2 --no-stats");
  EXPECT_EQ(r.exit_code, 0) << describe(r);
}

TEST(CheckpointCli, InspectNamesLayoutsRoutersSharedExpertsAndIgnoredKeys) {
  CliResult r = run_cli("inspect --json --no-stats " + testckpt::checkpoint_dir("deepseek_v4_native"));
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  nlohmann::json j = parse_json(r);
  EXPECT_EQ(j["moe_layers"], nlohmann::json::array({0, 1}));
  EXPECT_EQ(j["layers"][0]["layout"], "deepseek-v4");
  EXPECT_EQ(j["layers"][0]["router_detail"]["hash_table"]["name"], "layers.0.ffn.gate.tid2eid");
  EXPECT_EQ(j["layers"][1]["router_detail"]["bias"], "layers.1.ffn.gate.bias");
  EXPECT_EQ(j["layers"][1]["shared_intermediate"], 96);
  r = run_cli("inspect " + testckpt::checkpoint_dir("block_size_number"));
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("config key ignored: quantization_config.weight_block_size = 128"), std::string::npos)
      << describe(r);
  r = run_cli("inspect " + testckpt::refused_dir("gpt_oss"));
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.out.find("MoE layers found: 1 (1)"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("sigmoid(1.702 * gate)"), std::string::npos) << describe(r);
}

// --router with a checkpoint: its own router (or hash table) on the layer's input; the check is
// the usual one against the CPU layer on the same ids and weights.
TEST(CheckpointCli, RunRoutesWithTheCheckpointsRouter) {
  struct Case {
    std::string args, routing;
  };
  const std::vector<Case> cases = {
      {"deepseek_v4_native --layer 0", "hash table 'layers.0.ffn.gate.tid2eid' [64, 2]"},
      {"deepseek_v4_native --layer 1", "with bias 'layers.1.ffn.gate.bias'"},
      {"transformers_deepseek_v4 --layer 0 --backend nvfp4", "hash table 'model.layers.0.mlp.gate.tid2eid'"},
      {"transformers_deepseek_v4 --layer 1", "with bias 'model.layers.1.mlp.gate.e_score_correction_bias'"},
  };
  for (const Case& c : cases) {
    const CliResult r = run_cli("run --device cpu -T 24 --json --router --checkpoint " +
                                testckpt::data_dir() + "/ckpt/" + c.args);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    const nlohmann::json j = parse_json(r);
    EXPECT_EQ(j["check_passed"], true) << describe(r);
    EXPECT_EQ(j["valid_slots"], 48) << describe(r);  // the router fills every slot
    EXPECT_EQ(j["Is"], 96) << describe(r);
    EXPECT_NE(j["checkpoint"]["routing"].get<std::string>().find(c.routing), std::string::npos) << describe(r);
  }
  CliResult r = run_cli("run --device cpu -T 8 --router --checkpoint " + testckpt::checkpoint_dir("qwen3_moe_nvfp4"));
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("no scoring_func and model_type 'qwen3_moe'"), std::string::npos) << describe(r);
  r = run_cli("run --device cpu -T 8 --router --hash-layers 1 --checkpoint " + testckpt::checkpoint_dir("deepseek_v4_native"));
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("tid2eid tables decide"), std::string::npos) << describe(r);
  r = run_cli("run --device cpu -T 8 --router --checkpoint " + testckpt::checkpoint_dir("mxfp4_per_expert") + " --ranks 2");
  EXPECT_EQ(r.exit_code, 2) << describe(r);
}

TEST(CheckpointCli, RunWithoutTheSharedExpert) {
  const std::string ck = " --checkpoint " + testckpt::checkpoint_dir("nvfp4_shared_nvfp4");
  CliResult r = run_cli("run --device cpu -T 16 --json" + ck);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(parse_json(r)["Is"], 96);
  r = run_cli("run --device cpu -T 16 --json --no-shared-expert" + ck);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(parse_json(r)["Is"], 0);
  EXPECT_EQ(parse_json(r)["check_passed"], true);
  r = run_cli("run --device cpu -T 16 --no-shared-expert");
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("--no-shared-expert is a checkpoint flag"), std::string::npos) << describe(r);
  r = run_cli("run --device cpu -T 16 --checkpoint " + testckpt::bad_dir("fp8_shared_block_size_number"));
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("--no-shared-expert"), std::string::npos) << describe(r);
  r = run_cli("run --device cpu -T 16 --no-shared-expert --checkpoint " + testckpt::bad_dir("fp8_shared_block_size_number"));
  EXPECT_EQ(r.exit_code, 0) << describe(r);
}

}  // namespace
}  // namespace moe_ep::test
