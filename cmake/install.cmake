# `cmake --install BUILD --prefix P` installs the public headers, the library, the CLI and a
# package config, so that a C++ project writes
#   find_package(moe_ep 0.1 CONFIG REQUIRED [COMPONENTS CUDA NCCL])
#   target_link_libraries(app PRIVATE moe_ep::moe_ep)
# Components name the features compiled into the installed library (CUDA: the SM90 backend,
# NCCL: the multi-GPU transport); a required component the build lacks makes find_package fail.
include(CMakePackageConfigHelpers)

set(MOE_EP_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/moe_ep)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/moe_ep DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT moe_ep_dev)
install(TARGETS moe_ep EXPORT moe_epTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT moe_ep_dev
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT moe_ep_dev)
if(TARGET moe_ep_cli)
  install(TARGETS moe_ep_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT moe_ep_cli)
endif()
install(EXPORT moe_epTargets NAMESPACE moe_ep:: DESTINATION ${MOE_EP_INSTALL_CMAKEDIR}
        COMPONENT moe_ep_dev)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/moe_epConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/moe_epConfig.cmake
                              INSTALL_DESTINATION ${MOE_EP_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/moe_epConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/moe_epConfig.cmake ${PROJECT_BINARY_DIR}/moe_epConfigVersion.cmake
        DESTINATION ${MOE_EP_INSTALL_CMAKEDIR} COMPONENT moe_ep_dev)
