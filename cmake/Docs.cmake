# The API reference (doxygen, class and include graphs with graphviz's dot):
# the public headers of rdmalib and librfaas, nothing else.
#
#   cmake --build build --target docs    -> build/docs/api/html/index.html
#
# Every public call must be documented: an undocumented member or a malformed
# comment is a warning, and warnings are errors (WARN_AS_ERROR). The test
# docs.api (tests/docs/) renders the reference the same way, into a directory
# of its own, so that the README's test command checks it.
find_package(Doxygen QUIET OPTIONAL_COMPONENTS dot)
if(NOT DOXYGEN_FOUND)
  message(STATUS "rFaaS: doxygen not found, no 'docs' target (Debian: apt-get install doxygen graphviz)")
  return()
endif()

set(RFAAS_DOCS_HEADER_DIRS
  ${PROJECT_SOURCE_DIR}/rdmalib/include/rdmalib
  ${PROJECT_SOURCE_DIR}/rfaas/include/rfaas)
# rdmalib/config.hpp is generated: what the build chose.
set(RFAAS_DOCS_INPUT_LIST
  ${RFAAS_DOCS_HEADER_DIRS}
  ${PROJECT_BINARY_DIR}/rdmalib/include/rdmalib/config.hpp
  ${PROJECT_SOURCE_DIR}/docs/api/mainpage.md
  ${PROJECT_SOURCE_DIR}/docs/api/namespaces.dox)
string(REPLACE ";" " " RFAAS_DOCS_INPUT "${RFAAS_DOCS_INPUT_LIST}")
set(RFAAS_DOCS_STRIP
  "${PROJECT_SOURCE_DIR}/rdmalib/include ${PROJECT_SOURCE_DIR}/rfaas/include ${PROJECT_BINARY_DIR}/rdmalib/include")
set(RFAAS_DOCS_OUTPUT ${PROJECT_BINARY_DIR}/docs/api)
if(TARGET Doxygen::dot)
  set(RFAAS_DOCS_HAVE_DOT YES)
  get_target_property(dot_executable Doxygen::dot IMPORTED_LOCATION)
  get_filename_component(RFAAS_DOCS_DOT_PATH "${dot_executable}" DIRECTORY)
else()
  message(STATUS "rFaaS: graphviz's dot not found, the API reference has no graphs (Debian: graphviz)")
  set(RFAAS_DOCS_HAVE_DOT NO)
  set(RFAAS_DOCS_DOT_PATH "")
endif()
configure_file(${PROJECT_SOURCE_DIR}/docs/api/Doxyfile.in ${PROJECT_BINARY_DIR}/docs/Doxyfile @ONLY)

file(GLOB RFAAS_DOCS_HEADERS CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/rdmalib/include/rdmalib/*.hpp
  ${PROJECT_SOURCE_DIR}/rfaas/include/rfaas/*.hpp)
add_custom_command(
  OUTPUT ${RFAAS_DOCS_OUTPUT}/html/index.html
  COMMAND ${CMAKE_COMMAND} -E remove_directory ${RFAAS_DOCS_OUTPUT}/html
  COMMAND Doxygen::doxygen ${PROJECT_BINARY_DIR}/docs/Doxyfile
  DEPENDS ${RFAAS_DOCS_HEADERS} ${PROJECT_BINARY_DIR}/docs/Doxyfile
          ${PROJECT_SOURCE_DIR}/docs/api/mainpage.md ${PROJECT_SOURCE_DIR}/docs/api/namespaces.dox
  WORKING_DIRECTORY ${PROJECT_BINARY_DIR}
  COMMENT "doxygen: the API reference of rdmalib and librfaas (warnings are errors)"
  VERBATIM)
add_custom_target(docs DEPENDS ${RFAAS_DOCS_OUTPUT}/html/index.html)
