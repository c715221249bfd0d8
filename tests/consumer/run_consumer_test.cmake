# Installs the loom build in LOOM_BUILD_DIR into WORK_DIR/prefix, builds the consumer project in
# CONSUMER_SOURCE_DIR against it and runs it; fails unless it prints EXPECTED_LINE.
function(run_step description)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "consumer test: ${description} failed (${result})\n${out}\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
run_step("installing loom" ${CMAKE_COMMAND} --install "${LOOM_BUILD_DIR}" --prefix "${prefix}")
run_step("configuring the consumer" ${CMAKE_COMMAND} -S "${CONSUMER_SOURCE_DIR}" -B "${WORK_DIR}/build"
         -G "${GENERATOR}" -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix})
run_step("building the consumer" ${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run_step("running the consumer" "${WORK_DIR}/build/loom_consumer")
message(STATUS "${step_output}")
if(NOT step_output MATCHES "${EXPECTED_LINE}")
  message(FATAL_ERROR "consumer test: the consumer ran but did not print '${EXPECTED_LINE}':\n${step_output}")
endif()
