# The two ways a project takes in loom, each built and run:
#   MODE=find_package     installs the loom build in LOOM_BUILD_DIR into WORK_DIR/prefix, checks
#                         that the installed package carries no instruction-set flags, and builds
#                         CONSUMER_SOURCE_DIR against it;
#   MODE=find_package_cpu the same as a CPU-only user of a loom built with CUDA, NCCL, cuDNN and MPI:
#                         the consumer asks for no component, and its configure cannot find the
#                         CUDA toolkit, NCCL, cuDNN or MPI (CMAKE_DISABLE_FIND_PACKAGE_*, which
#                         makes finding them an error, and no nvcc on its PATH);
#   MODE=add_subdirectory builds CONSUMER_SOURCE_DIR/subdirectory, which adds loom's sources
#                         (LOOM_SOURCE_DIR) as a subdirectory, with LOOM_CUDA / LOOM_MPI as given
#                         and the loom build's CXX_LAUNCHER and LOOM_WERROR.
# Either fails unless the consumer prints EXPECTED_LINE.
function(run_step description)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "consumer test: ${description} failed (${result})\n${out}\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
if(MODE MATCHES "^find_package")
  set(prefix "${WORK_DIR}/prefix")
  run_step("installing loom" ${CMAKE_COMMAND} --install "${LOOM_BUILD_DIR}" --prefix "${prefix}")
  file(GLOB_RECURSE package_files "${prefix}/*.cmake")
  foreach(file IN LISTS package_files)
    file(STRINGS "${file}" isa_flags REGEX "-march|-mtune|-mavx|-mfma|-msse")
    if(isa_flags)
      message(FATAL_ERROR "consumer test: the installed ${file} passes instruction-set flags to users: ${isa_flags}")
    endif()
  endforeach()
  set(hide)
  if(MODE STREQUAL "find_package_cpu")
    set(hide ${CMAKE_COMMAND} -E env PATH=/usr/sbin:/usr/bin:/sbin:/bin --unset=CUDA_PATH --unset=CUDAToolkit_ROOT
             --unset=NCCL_HOME --unset=CUDNN_HOME --unset=CUDACXX)
    set(cpu_only -DLOOM_CONSUMER_CPU_ONLY=ON -DCMAKE_IGNORE_PREFIX_PATH=/usr/local/cuda)
    foreach(package CUDAToolkit NCCL CUDNN MPI)
      list(APPEND cpu_only -DCMAKE_DISABLE_FIND_PACKAGE_${package}=ON)
    endforeach()
  endif()
  run_step("configuring the consumer" ${hide} ${CMAKE_COMMAND} -S "${CONSUMER_SOURCE_DIR}" -B "${WORK_DIR}/build"
           -G "${GENERATOR}" -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix} ${cpu_only})
elseif(MODE STREQUAL "add_subdirectory")
  run_step("configuring the consumer" ${CMAKE_COMMAND} -S "${CONSUMER_SOURCE_DIR}/subdirectory"
           -B "${WORK_DIR}/build" -G "${GENERATOR}" -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
           -DCMAKE_BUILD_TYPE=Release -DLOOM_SOURCE_DIR=${LOOM_SOURCE_DIR} -DLOOM_CUDA=${LOOM_CUDA}
           -DLOOM_MPI=${LOOM_MPI} -DCMAKE_CUDA_ARCHITECTURES=80 "-DCMAKE_CXX_COMPILER_LAUNCHER=${CXX_LAUNCHER}"
           -DLOOM_WERROR=${LOOM_WERROR})
else()
  message(FATAL_ERROR "consumer test: MODE must be find_package, find_package_cpu or add_subdirectory, got '${MODE}'")
endif()
include(ProcessorCount)
ProcessorCount(jobs)
run_step("building the consumer" ${CMAKE_COMMAND} --build "${WORK_DIR}/build" --target loom_consumer --parallel ${jobs})
run_step("running the consumer" "${WORK_DIR}/build/loom_consumer")
message(STATUS "${step_output}")
if(NOT step_output MATCHES "${EXPECTED_LINE}")
  message(FATAL_ERROR "consumer test: the consumer ran but did not print '${EXPECTED_LINE}':\n${step_output}")
endif()
if(MODE STREQUAL "find_package_cpu")
  # The same package on a machine without one of its run-time libraries: configuring names it.
  set(config "${prefix}/lib/cmake/loom/loomConfig.cmake")
  if(NOT EXISTS "${config}")
    file(GLOB config "${prefix}/*/cmake/loom/loomConfig.cmake")
  endif()
  file(READ "${config}" text)
  string(REPLACE "set(_loom_runtime_libraries \"" "set(_loom_runtime_libraries \"/nonexistent/libloomtest.so.7.1;"
         text "${text}")
  file(WRITE "${config}" "${text}")
  execute_process(COMMAND ${hide} ${CMAKE_COMMAND} -S "${CONSUMER_SOURCE_DIR}" -B "${WORK_DIR}/missing" -G "${GENERATOR}"
                  -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix} ${cpu_only}
                  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REGEX REPLACE "[ \n]+" " " said "${out}${err}")
  if(result EQUAL 0 OR NOT said MATCHES "loads libloomtest.so.7 at run time, which is not on this machine")
    message(FATAL_ERROR "consumer test: a missing run-time library was not named (exit ${result}):\n${out}\n${err}")
  endif()
  message(STATUS "a missing run-time library is named: ${said}")
endif()
