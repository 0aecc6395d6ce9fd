# ctest script: installs the build tree into a fresh prefix, configures and builds
# tests/consumer against it (find_package(moe_ep)), and runs the consumer.
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -P consumer_test.cmake
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer test: `${ARGN}` failed (${rc})")
  endif()
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix --component moe_ep_dev)
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build -G Ninja -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix ${EXTRA_ARGS})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)
# A component the installed build lacks must make find_package fail with the reason.
if(NOT WITH_CUDA)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build-cuda -G Ninja
                          -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DMOE_EP_CONSUMER_COMPONENTS=CUDA
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0 OR NOT err MATCHES "built without CUDA")
    message(FATAL_ERROR "consumer test: find_package(moe_ep COMPONENTS CUDA) on a CPU-only "
                        "install did not fail with the reason:\n${out}\n${err}")
  endif()
endif()
message(STATUS "consumer test: passed")
