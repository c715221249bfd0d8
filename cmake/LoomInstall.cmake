# install(): headers, the library, and a relocatable CMake package exporting loom::loom.
set(LOOM_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/loom")

install(TARGETS loom EXPORT loomTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/loom" DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES "${LOOM_GENERATED_INCLUDE_DIR}/loom/config.hpp" DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/loom)
install(EXPORT loomTargets NAMESPACE loom:: DESTINATION ${LOOM_CMAKE_DIR})

if(NCCL_INCLUDE_DIR)
  get_filename_component(LOOM_NCCL_PREFIX "${NCCL_INCLUDE_DIR}" DIRECTORY)
endif()
if(CUDNN_INCLUDE_DIR)
  get_filename_component(LOOM_CUDNN_PREFIX "${CUDNN_INCLUDE_DIR}" DIRECTORY)
endif()
configure_package_config_file(cmake/loomConfig.cmake.in "${PROJECT_BINARY_DIR}/loomConfig.cmake"
                              INSTALL_DESTINATION ${LOOM_CMAKE_DIR})
write_basic_package_version_file("${PROJECT_BINARY_DIR}/loomConfigVersion.cmake"
                                 COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/loomConfig.cmake" "${PROJECT_BINARY_DIR}/loomConfigVersion.cmake"
              cmake/FindNCCL.cmake cmake/FindCUDNN.cmake
        DESTINATION ${LOOM_CMAKE_DIR})
