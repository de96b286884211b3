# Writes the commit the benchmarks are built from into a header (only when it
# changed, so nothing recompiles otherwise), for the JSON they write. Run at
# every build by the rfaas_bench_commit target: a commit made after configuring
# is still reported right. "-dirty" marks uncommitted changes to tracked files.
execute_process(COMMAND git -C "${SRC}" rev-parse HEAD OUTPUT_VARIABLE commit
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
else()
  execute_process(COMMAND git -C "${SRC}" status --porcelain --untracked-files=no
                  OUTPUT_VARIABLE changes ERROR_QUIET)
  if(NOT changes STREQUAL "")
    string(APPEND commit "-dirty")
  endif()
endif()
file(WRITE "${OUT}.tmp" "#define RFAAS_GIT_COMMIT \"${commit}\"\n")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUT}.tmp" "${OUT}")
file(REMOVE "${OUT}.tmp")
