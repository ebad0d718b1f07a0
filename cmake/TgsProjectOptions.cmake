# SPDX-License-Identifier: Apache-2.0
# tgs_project_options: warnings as errors and sanitizers for the project's own targets only.
# It is linked PRIVATE and never exported, so consumers of tgs::tgs see none of it.
add_library(tgs_project_options INTERFACE)
# Off in the first-run build of scripts/run.sh (a newer compiler's new warning must not stop a
# user's first run; CI fails on any warning that build prints: install.FirstRunBuild); on for the
# developers' and CI's builds.
option(TGS_WERROR "Treat warnings in the project's own code as errors" ${PROJECT_IS_TOP_LEVEL})
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(tgs_project_options INTERFACE
    -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wnon-virtual-dtor
    -Wold-style-cast -Woverloaded-virtual -Wimplicit-fallthrough
    $<$<BOOL:${TGS_WERROR}>:-Werror>)
  # GCC 12 at -O3 (a Release build) reports std::string concatenations in the standard library's
  # own inlined code as overlapping copies (GCC bug 105329, fixed in 13): off there.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(tgs_project_options INTERFACE -Wno-restrict)
  endif()
endif()
if(TGS_SANITIZE)
  string(REPLACE "," ";" _tgs_sanitizers "${TGS_SANITIZE}")
  foreach(_s IN LISTS _tgs_sanitizers)
    if(NOT _s MATCHES "^(address|undefined|thread|leak)$")
      message(FATAL_ERROR "TGS_SANITIZE: unknown sanitizer '${_s}' (use address,undefined or thread)")
    endif()
  endforeach()
  set(_tgs_sanitize "${TGS_SANITIZE}")
  # GCC's `undefined` leaves out float-cast-overflow (a double too large for the integer it is
  # converted to, as a rate turned into a count of blocks); clang's includes it. Named explicitly.
  if("undefined" IN_LIST _tgs_sanitizers)
    string(APPEND _tgs_sanitize ",float-cast-overflow")
  endif()
  target_compile_options(tgs_project_options INTERFACE
    -fsanitize=${_tgs_sanitize} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_link_options(tgs_project_options INTERFACE -fsanitize=${_tgs_sanitize})
endif()

# tgs_binary(target): a project executable (tool, test, benchmark) that lands in build/bin and
# is built with the project's warnings and sanitizers.
function(tgs_binary target)
  set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${TGS_BIN_DIR})
  target_link_libraries(${target} PRIVATE tgs_project_options)
endfunction()
