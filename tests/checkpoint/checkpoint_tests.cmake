# ---- Checkpoints: the suites *Checkpoint* read safetensors checkpoints that
# tests/python/gen_checkpoints.py writes with the `safetensors` package (python3 -m pip install
# -r tests/python/requirements.txt). The generator runs as the fixture `checkpoints` before
# them; when it fails (a missing package names itself), they fail too.
set(MOE_EP_CHECKPOINTS_DIR ${CMAKE_CURRENT_BINARY_DIR}/data/checkpoints)
if(Python3_Interpreter_FOUND)
  add_test(NAME checkpoints_generate
           COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/python/gen_checkpoints.py
                   ${MOE_EP_CHECKPOINTS_DIR})
else()
  add_test(NAME checkpoints_generate COMMAND ${CMAKE_COMMAND} -E false)
endif()
set_tests_properties(checkpoints_generate PROPERTIES FIXTURES_SETUP checkpoints)
gtest_discover_tests(moe_ep_tests DISCOVERY_TIMEOUT 60 TEST_FILTER "*Checkpoint*"
  TEST_LIST moe_ep_checkpoint_tests
  PROPERTIES FIXTURES_REQUIRED checkpoints
             ENVIRONMENT "MOE_EP_TEST_DATA=${CMAKE_CURRENT_BINARY_DIR}/data")
# Without the data the suites must fail with the message that says how to make it, not skip.
add_test(NAME checkpoints_missing_is_a_failure COMMAND moe_ep_tests --gtest_filter=*Checkpoint*)
set_tests_properties(checkpoints_missing_is_a_failure PROPERTIES
  ENVIRONMENT "MOE_EP_TEST_DATA=${CMAKE_CURRENT_BINARY_DIR}/no-checkpoints-here"
  PASS_REGULAR_EXPRESSION "missing checkpoint test data.*\\[  FAILED  \\]"
  FAIL_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
