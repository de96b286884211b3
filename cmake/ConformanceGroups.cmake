# Included by ctest (TEST_INCLUDE_FILES of tests/): registers the conformance
# suite as one ctest test per provider configuration, e.g.
# conformance.tcp_msg__no_atomics runs every case of that configuration in one
# process, and conformance.Errors the cases without a provider.
#
# Why not one ctest test per case (gtest_discover_tests): loading Debian's
# libfabric costs every new process ~0.25 s (a PSM library constructor
# calibrates a clock by sleeping), which was more than half of the suite's
# time: 449 cases took ~220 s as processes and ~80 s grouped. A case that
# hangs is still named and ended by the suite's own watchdog (main.cpp), and
# the failed cases of a group are listed in its output.
#
# Expects RFAAS_CONFORMANCE_BINARY (the rdmalib_conformance executable) and
# RFAAS_CONFORMANCE_TIMEOUT (seconds per group).
if(NOT EXISTS "${RFAAS_CONFORMANCE_BINARY}")
  # Not built (yet): a test that says so instead of a silently empty suite.
  add_test(conformance.NOT_BUILT /bin/sh -c
           "echo '${RFAAS_CONFORMANCE_BINARY} does not exist: build the tests first' >&2; exit 1")
  return()
endif()

execute_process(
  COMMAND "${RFAAS_CONFORMANCE_BINARY}" --gtest_list_tests
  OUTPUT_VARIABLE listing
  ERROR_VARIABLE listing_error
  RESULT_VARIABLE listing_status
  TIMEOUT 60)
if(NOT listing_status EQUAL 0)
  string(REPLACE "'" "" listing_error "${listing_error}")
  add_test(conformance.LISTING_FAILED /bin/sh -c
           "echo '${RFAAS_CONFORMANCE_BINARY} --gtest_list_tests failed (${listing_status}): ${listing_error}' >&2; exit 1")
  return()
endif()

# Suites are lines without indentation ("Providers/DataPath."); cases are
# indented ("  WriteDeliversBytes/tcp_msg__native  # GetParam() = ...").
# A parameterised case's configuration is what follows its last '/'.
set(groups "")
set(plain_suites "")
string(REPLACE "\n" ";" lines "${listing}")
foreach(line IN LISTS lines)
  if(line MATCHES "^([A-Za-z0-9_/]+)\\.$")
    set(suite "${CMAKE_MATCH_1}")
  elseif(line MATCHES "^  ([A-Za-z0-9_]+)/([A-Za-z0-9_]+)")
    list(APPEND groups "${CMAKE_MATCH_2}")
  elseif(line MATCHES "^  [A-Za-z0-9_]+")
    list(APPEND plain_suites "${suite}")
  endif()
endforeach()
list(REMOVE_DUPLICATES groups)
list(REMOVE_DUPLICATES plain_suites)

set(registered "")
foreach(group IN LISTS groups)
  add_test(conformance.${group} "${RFAAS_CONFORMANCE_BINARY}" "--gtest_filter=*/${group}")
  list(APPEND registered conformance.${group})
endforeach()
# The same cases with addresses exchanged only as the providers' opaque
# endpoint names ("ofi:FORMAT:HEX"): the devices have no ip_address, as on
# EFA (tests/rdmalib/conformance/common.hpp, RFAAS_TEST_OPAQUE_ADDRESSES). The native
# configuration of one provider per address format: sockaddr_in over MSG and
# over RxM, and shm's string names; tcp needs its loopback domain named.
foreach(group IN LISTS groups)
  if(group MATCHES "^(tcp_msg|tcp_ofi_rxm_rdm|shm_rdm)(__native)?$")
    set(domain "")
    if(group MATCHES "^tcp")
      set(domain lo)
    endif()
    add_test(conformance.opaque.${group} "${RFAAS_CONFORMANCE_BINARY}" "--gtest_filter=*/${group}")
    set_tests_properties(conformance.opaque.${group} PROPERTIES ENVIRONMENT
      "RFAAS_TEST_OPAQUE_ADDRESSES=1;RFAAS_TEST_SERVER_DEVICE=${domain};RFAAS_TEST_CLIENT_DEVICE=${domain}")
    list(APPEND registered conformance.opaque.${group})
  endif()
endforeach()
foreach(suite IN LISTS plain_suites)
  add_test(conformance.${suite} "${RFAAS_CONFORMANCE_BINARY}" "--gtest_filter=${suite}.*")
  list(APPEND registered conformance.${suite})
endforeach()
if(registered)
  # Both sides of a link busy-poll: each group runs alone (RUN_SERIAL). A
  # skipped case is printed by googletest with its reason.
  set_tests_properties(${registered} PROPERTIES
    LABELS conformance
    TIMEOUT ${RFAAS_CONFORMANCE_TIMEOUT}
    RUN_SERIAL TRUE)
endif()
