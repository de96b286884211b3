# Every dependency is a Debian package. A missing one stops configuration with
# the name of the package to install (the README's setup command installs all).
find_package(PkgConfig QUIET)

function(rfaas_missing what package)
  message(FATAL_ERROR "rFaaS: ${what} not found. Install it with:\n  apt-get install ${package}\n"
                      "(or run scripts/install-deps.sh, which installs everything the build needs)")
endfunction()

if(NOT PkgConfig_FOUND)
  rfaas_missing("pkg-config" "pkg-config")
endif()

find_package(Threads REQUIRED)

find_package(spdlog QUIET)
if(NOT spdlog_FOUND)
  rfaas_missing("spdlog" "libspdlog-dev")
endif()

find_package(nlohmann_json 3 QUIET)
if(NOT nlohmann_json_FOUND)
  rfaas_missing("nlohmann-json" "nlohmann-json3-dev")
endif()

# MUNGE: clients' identity (librfaas encodes credentials for its lease
# requests, the resource manager decodes them).
pkg_check_modules(RFAAS_MUNGE QUIET IMPORTED_TARGET GLOBAL munge)
if(NOT RFAAS_MUNGE_FOUND)
  rfaas_missing("MUNGE" "libmunge-dev")
endif()

find_path(CXXOPTS_INCLUDE_DIR cxxopts.hpp)
if(NOT CXXOPTS_INCLUDE_DIR)
  rfaas_missing("cxxopts" "libcxxopts-dev")
endif()
add_library(rfaas_cxxopts INTERFACE)
target_include_directories(rfaas_cxxopts INTERFACE ${CXXOPTS_INCLUDE_DIR})

if(RFAAS_NETWORK_BACKEND STREQUAL "libfabric")
  pkg_check_modules(LIBFABRIC QUIET IMPORTED_TARGET libfabric)
  if(NOT LIBFABRIC_FOUND)
    rfaas_missing("libfabric" "libfabric-dev")
  endif()
elseif(RFAAS_NETWORK_BACKEND STREQUAL "verbs")
  find_library(IBVERBS_LIBRARY ibverbs)
  find_path(IBVERBS_INCLUDE_DIR infiniband/verbs.h)
  if(NOT IBVERBS_LIBRARY OR NOT IBVERBS_INCLUDE_DIR)
    rfaas_missing("libibverbs" "libibverbs-dev")
  endif()
  find_library(RDMACM_LIBRARY rdmacm)
  find_path(RDMACM_INCLUDE_DIR rdma/rdma_cma.h)
  if(NOT RDMACM_LIBRARY OR NOT RDMACM_INCLUDE_DIR)
    rfaas_missing("librdmacm" "librdmacm-dev")
  endif()
else()
  message(FATAL_ERROR "rFaaS: RFAAS_NETWORK_BACKEND must be 'libfabric' or 'verbs', not '${RFAAS_NETWORK_BACKEND}'")
endif()

# The executors' seccomp filter (server/executor/seccomp_filter.cpp).
pkg_check_modules(LIBSECCOMP QUIET IMPORTED_TARGET libseccomp)
if(NOT LIBSECCOMP_FOUND)
  rfaas_missing("libseccomp" "libseccomp-dev")
endif()

if(RFAAS_BUILD_TESTS)
  find_package(GTest QUIET)
  if(NOT GTest_FOUND)
    rfaas_missing("googletest" "libgtest-dev")
  endif()
endif()
