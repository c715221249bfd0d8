# Writes OUT (a header defining LOOM_BUILD_COMMIT) with the source tree's commit at build time,
# "-dirty" appended when tracked files differ from it, and touches OUT only when that changes (so
# a rebuild of the benchmarks follows a commit, and nothing else).
execute_process(COMMAND git --no-optional-locks rev-parse HEAD WORKING_DIRECTORY ${SOURCE_DIR}
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE failed)
if(failed OR commit STREQUAL "")
  set(commit "unknown (not a git checkout)")
else()
  execute_process(COMMAND git --no-optional-locks status --porcelain --untracked-files=no
                  WORKING_DIRECTORY ${SOURCE_DIR}
                  OUTPUT_VARIABLE changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE status_failed)
  if(status_failed)
    string(APPEND commit "-unknown-state")  # the tree could not be compared with it
  elseif(NOT changes STREQUAL "")
    string(APPEND commit "-dirty")
  endif()
endif()
set(text "#pragma once\n#define LOOM_BUILD_COMMIT \"${commit}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
