# Debian packages through CPack, one per install component:
#
#   rfaas           (runtime)      executor_manager, executor, resource_manager,
#                                  rfaas-info, librfaas.so.N, example configuration,
#                                  /etc/rfaas/, systemd units, the rfaas user
#   rfaas-dev       (development)  headers, librfaas.so, rdmalib's static
#                                  libraries, CMake package, pkg-config file
#   rfaas-examples  (examples)     rfaas-example-client and libfunctions.so
#   python3-rfaas   (python)       the Python module, when RFAAS_BUILD_PYTHON is on
#
#   cmake --build build && (cd build && cpack -G DEB)
#
# docs/packages.md says what goes where. Packages are built for the prefix
# /usr whatever CMAKE_INSTALL_PREFIX says, so that the units' ExecStart lines
# and /etc/rfaas match what dpkg installs.
set(RFAAS_PACKAGING_DIR ${PROJECT_SOURCE_DIR}/packaging)

# ---- files only the packages install ------------------------------------------------
# EXCLUDE_FROM_ALL: a plain `cmake --install build --prefix DIR` (the
# relocatable installation of docs/building.md) never writes to /etc; a
# package build installs them with the runtime component.
install(FILES ${PROJECT_SOURCE_DIR}/config/devices.json
              ${RFAAS_PACKAGING_DIR}/etc/executor_manager.json
              ${RFAAS_PACKAGING_DIR}/etc/resource_manager.json
        DESTINATION /etc/rfaas COMPONENT runtime EXCLUDE_FROM_ALL)
install(FILES ${PROJECT_SOURCE_DIR}/README.md
              ${PROJECT_SOURCE_DIR}/docs/runtime.md
              ${PROJECT_SOURCE_DIR}/docs/resource_manager.md
              ${PROJECT_SOURCE_DIR}/docs/packages.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime EXCLUDE_FROM_ALL)
install(FILES ${PROJECT_SOURCE_DIR}/config/README.md RENAME configuration.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime EXCLUDE_FROM_ALL)
# The units name the installed binaries by their full path, known only when
# the install runs (a package installs into /usr, not CMAKE_INSTALL_PREFIX).
install(CODE "
  set(RFAAS_UNIT_BINDIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}\")
  set(RFAAS_UNIT_LIBEXECDIR \"\${CMAKE_INSTALL_PREFIX}/${RFAAS_INSTALL_LIBEXECDIR}\")
  set(RFAAS_UNIT_DOCDIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_DOCDIR}\")
  foreach(unit rfaas-resource-manager rfaas-executor-manager)
    configure_file(\"${RFAAS_PACKAGING_DIR}/systemd/\${unit}.service.in\"
                   \"${PROJECT_BINARY_DIR}/packaging/systemd/\${unit}.service\" @ONLY)
    file(INSTALL \"${PROJECT_BINARY_DIR}/packaging/systemd/\${unit}.service\"
         DESTINATION \"\${CMAKE_INSTALL_PREFIX}/lib/systemd/system\"
         FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
  endforeach()
" COMPONENT runtime EXCLUDE_FROM_ALL)

# ---- CPack ---------------------------------------------------------------------------
set(CPACK_PACKAGE_NAME rfaas)
set(CPACK_PACKAGE_VENDOR "rFaaS")
set(CPACK_PACKAGE_CONTACT "rFaaS maintainers <rfaas@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "serverless functions for HPC over RDMA networks")
set(CPACK_PACKAGE_DESCRIPTION
  "rFaaS leases cores on remote executor servers and invokes functions by writing their input straight into the memory of a worker, over libfabric or ibverbs.")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
# As Debian's own packages: binaries without their debug information.
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
# The runtime package's dependencies on shared libraries (libfabric1,
# libspdlog1.10, libsqlite3-0, ...) come from its binaries (dpkg-shlibdeps),
# and it declares librfaas.so.N for packages that link it (shlibs).
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY "=")

set(CPACK_COMPONENTS_ALL runtime development examples)
# The hook for the Python module: its install rules use COMPONENT python.
if(RFAAS_BUILD_PYTHON)
  list(APPEND CPACK_COMPONENTS_ALL python)
endif()

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME rfaas)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_DEPENDS "adduser")
# /etc/rfaas/*.json are configuration files: an upgrade keeps the
# operator's edits, a purge removes them.
file(WRITE ${PROJECT_BINARY_DIR}/packaging/debian/conffiles
  "/etc/rfaas/devices.json\n/etc/rfaas/executor_manager.json\n/etc/rfaas/resource_manager.json\n")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA
  ${PROJECT_BINARY_DIR}/packaging/debian/conffiles
  ${RFAAS_PACKAGING_DIR}/debian/postinst
  ${RFAAS_PACKAGING_DIR}/debian/prerm
  ${RFAAS_PACKAGING_DIR}/debian/postrm)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)

set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_NAME rfaas-dev)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_SECTION libdevel)
# rfaas::rdmalib is a static library: its users link the backend and
# spdlog themselves (rfaasConfig.cmake finds them).
if(RFAAS_NETWORK_BACKEND STREQUAL "verbs")
  set(rfaas_backend_dev "libibverbs-dev, librdmacm-dev")
else()
  set(rfaas_backend_dev "libfabric-dev")
endif()
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_DEPENDS
  "${rfaas_backend_dev}, libspdlog-dev, nlohmann-json3-dev, pkg-config")

set(CPACK_DEBIAN_EXAMPLES_PACKAGE_NAME rfaas-examples)
# The example client links librfaas and the C++ runtime only, which the
# dependency on rfaas brings (dpkg-shlibdeps would look for librfaas.so.0 in an
# installed package, which it is not while the packages are built).
set(CPACK_DEBIAN_EXAMPLES_PACKAGE_SHLIBDEPS OFF)

# The module's install rules decide where it goes; for the package, below
# the prefix in lib/python3/dist-packages (Debian's path for modules of its
# python3 outside /usr/local). Like the examples, it links librfaas only.
set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-rfaas)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "python3")
set(CPACK_DEBIAN_PYTHON_PACKAGE_SHLIBDEPS OFF)

include(CPack)
cpack_add_component(runtime DISPLAY_NAME "rFaaS services, tools and librfaas")
cpack_add_component(development DISPLAY_NAME "rFaaS development files" DEPENDS runtime)
cpack_add_component(examples DISPLAY_NAME "rFaaS example client and functions" DEPENDS runtime)
cpack_add_component(python DISPLAY_NAME "rFaaS Python module" DEPENDS runtime)
