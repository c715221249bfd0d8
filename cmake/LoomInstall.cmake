# install(): headers, the library, and a relocatable CMake package exporting loom::loom.
set(LOOM_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/loom")

install(TARGETS loom EXPORT loomTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# The vendor-code wrappers ship only with the library they wrap.
set(_loom_header_excludes)
foreach(pair "CUDA;cuda_check" "CUDA;cuda_device_guard" "CUDNN;cudnn_check" "NCCL;nccl_check" "MPI;mpi_check")
  list(GET pair 0 feature)
  list(GET pair 1 header)
  if(NOT LOOM_WITH_${feature})
    list(APPEND _loom_header_excludes PATTERN "${header}.hpp" EXCLUDE)
  endif()
endforeach()
install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/loom" DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        ${_loom_header_excludes})
install(FILES "${LOOM_GENERATED_INCLUDE_DIR}/loom/config.hpp" DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/loom)
install(EXPORT loomTargets NAMESPACE loom:: DESTINATION ${LOOM_CMAKE_DIR})

if(LOOM_WITH_CUDA)
  get_filename_component(LOOM_CUDA_TOOLKIT_ROOT "${CUDAToolkit_BIN_DIR}" DIRECTORY)
endif()
if(NCCL_INCLUDE_DIR)
  get_filename_component(LOOM_NCCL_PREFIX "${NCCL_INCLUDE_DIR}" DIRECTORY)
endif()
if(CUDNN_INCLUDE_DIR)
  get_filename_component(LOOM_CUDNN_PREFIX "${CUDNN_INCLUDE_DIR}" DIRECTORY)
endif()
# The vendor libraries a shared libloom loads at run time, as this build found them: the installed
# package checks that they are there (by path, or by file name in the linker's search path) and
# otherwise names the one missing and what to install.
set(LOOM_RUNTIME_LIBRARIES)
if(LOOM_SHARED)
  foreach(target CUDA::cudart CUDA::cublas CUDA::cublasLt NCCL::NCCL CUDNN::cudnn)
    if(TARGET ${target})
      get_target_property(location ${target} IMPORTED_LOCATION)
      if(location)
        get_filename_component(location "${location}" REALPATH)
        list(APPEND LOOM_RUNTIME_LIBRARIES "${location}")
      endif()
    endif()
  endforeach()
endif()
configure_package_config_file(cmake/loomConfig.cmake.in "${PROJECT_BINARY_DIR}/loomConfig.cmake"
                              INSTALL_DESTINATION ${LOOM_CMAKE_DIR})
write_basic_package_version_file("${PROJECT_BINARY_DIR}/loomConfigVersion.cmake"
                                 COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/loomConfig.cmake" "${PROJECT_BINARY_DIR}/loomConfigVersion.cmake"
              cmake/FindNCCL.cmake cmake/FindCUDNN.cmake
        DESTINATION ${LOOM_CMAKE_DIR})
