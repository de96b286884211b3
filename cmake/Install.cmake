# Install rules shared by the subdirectories.
#
# `cmake --install` must work after any build, also after a partial one such as
# scripts/main-job.sh builds (only the targets it runs): every program or
# library is installed OPTIONAL, and one that was not built is reported with a
# warning that names the command building it, instead of stopping the install
# half-way ("cannot find .../rfaas-info") or leaving it out silently.
include(GNUInstallDirs)

# Internal programs that users never start (the executor, spawned by the
# executor_manager) go below libexec, in a directory of their own so that a
# generic name like "executor" cannot collide with another package's.
set(RFAAS_INSTALL_LIBEXECDIR ${CMAKE_INSTALL_LIBEXECDIR}/rfaas)
# Example configuration files (config/*.json).
set(RFAAS_INSTALL_DATADIR ${CMAKE_INSTALL_DATADIR}/rfaas)

# rfaas_install_built(TARGET <target> [install(TARGETS) arguments...])
# install(TARGETS <target> ... OPTIONAL) plus the warning when it was not built.
function(rfaas_install_built)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "TARGET" "")
  # OPTIONAL belongs to each artifact kind (LIBRARY, RUNTIME...): add it after
  # every DESTINATION.
  set(args "")
  set(after_destination FALSE)
  foreach(a IN LISTS arg_UNPARSED_ARGUMENTS)
    list(APPEND args ${a})
    if(after_destination)
      list(APPEND args OPTIONAL)
    endif()
    string(COMPARE EQUAL "${a}" DESTINATION after_destination)
  endforeach()
  install(TARGETS ${arg_TARGET} ${args})
  # The warning belongs to the artifact's component (the first named), so a
  # package build (cmake/Packaging.cmake) has no component of its own for it.
  set(component "")
  list(FIND arg_UNPARSED_ARGUMENTS COMPONENT at)
  if(at GREATER -1)
    math(EXPR at "${at} + 1")
    list(GET arg_UNPARSED_ARGUMENTS ${at} component)
    set(component COMPONENT ${component})
  endif()
  install(CODE "if(NOT EXISTS \"$<TARGET_FILE:${arg_TARGET}>\")
  message(WARNING \"rFaaS: ${arg_TARGET} was not built, so it is not installed. \"
    \"Build it first: cmake --build ${CMAKE_BINARY_DIR} --target ${arg_TARGET}\")
endif()" ${component})
endfunction()
