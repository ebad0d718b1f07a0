# SPDX-License-Identifier: Apache-2.0
# Install rules of tgs's programs: the tools in bin with a man page made from their --help (by
# help2man, at build time), the interposer in a private library folder, and systemd units.
# Every install rule names its component, one per Debian package (cmake/TgsPackage.cmake):
#   node    tgs-node, the interposer, the systemd unit, the device plugin   -> tgs-node
#   sim     the simulator                                                   -> tgs-sim
#   dev     the policy headers and the CMake package (find_package(tgs))    -> libtgs-dev
#   python  the Python module tgs                                           -> python3-tgs
set(TGS_INSTALL_COMPONENTS node sim dev python)
set(TGS_INSTALL_PRIVATE_LIBDIR lib/tgs CACHE STRING
    "Folder under the prefix for libtgs-intercept.so (a preload library, not for the linker's path)")
set(TGS_INSTALL_SYSTEMD_UNITDIR lib/systemd/system CACHE STRING "Folder under the prefix for systemd units")

find_program(TGS_HELP2MAN help2man)
set(_tgs_man_default OFF)
# Sanitizer builds are for tests, not for installing; their programs' exit reports could fail it.
if(TGS_HELP2MAN AND NOT TGS_SANITIZE)
  set(_tgs_man_default ON)
endif()
option(TGS_BUILD_MAN "Make man pages from each tool's --help (needs help2man)" ${_tgs_man_default})
if(TGS_BUILD_MAN AND NOT TGS_HELP2MAN)
  message(FATAL_ERROR "TGS_BUILD_MAN needs help2man: apt-get install help2man, or -DTGS_BUILD_MAN=OFF")
endif()
if(NOT TGS_BUILD_MAN)
  message(STATUS "tgs: man pages not built (TGS_BUILD_MAN is off; it needs help2man)")
endif()

# tgs_install_tool(target "one-line description" COMPONENT component [SUBCOMMANDS sub...]):
# installs the tool in bin and its man page (man1/<target>.1) in the man folder, both in the
# install component named. The page is help2man's rendering of
# `<target> --help` and `--version`, and has a SUBCOMMANDS section with `<target> <sub> --help`
# for each subcommand named.
function(tgs_install_tool target description)
  cmake_parse_arguments(ARG "" "COMPONENT" "SUBCOMMANDS" ${ARGN})
  if(NOT ARG_COMPONENT IN_LIST TGS_INSTALL_COMPONENTS)
    message(FATAL_ERROR "tgs_install_tool(${target}): COMPONENT must be one of ${TGS_INSTALL_COMPONENTS}")
  endif()
  install(TARGETS ${target} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT ${ARG_COMPONENT})
  if(NOT TGS_BUILD_MAN)
    return()
  endif()
  set(page ${PROJECT_BINARY_DIR}/man/man1/${target}.1)
  set(subcommands "")
  set(include "")
  if(ARG_SUBCOMMANDS)
    set(include ${PROJECT_BINARY_DIR}/man/${target}.h2m)
    set(subcommands COMMAND sh ${PROJECT_SOURCE_DIR}/cmake/man-subcommands.sh $<TARGET_FILE:${target}>
                    ${include} ${ARG_SUBCOMMANDS})
    set(include --include ${include})
  endif()
  add_custom_command(OUTPUT ${page}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/man/man1
    ${subcommands}
    COMMAND ${TGS_HELP2MAN} --no-info --name ${description} ${include} --output ${page}
            $<TARGET_FILE:${target}>
    DEPENDS ${target} ${PROJECT_SOURCE_DIR}/cmake/man-subcommands.sh
    COMMENT "Making the man page of ${target}"
    VERBATIM)
  add_custom_target(${target}-man ALL DEPENDS ${page})
  install(FILES ${page} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT ${ARG_COMPONENT})
endfunction()

# tgs_install_unit(template): installs, in the node component, a systemd unit made from `template`
# (<name>.in) at install time, so that @TGS_INSTALL_FULL_BINDIR@ is the bin folder of the prefix
# actually installed to (`cmake --install --prefix`, or /usr in the package), not the one configured.
function(tgs_install_unit template)
  get_filename_component(unit ${template} NAME)
  string(REGEX REPLACE "\\.in$" "" unit ${unit})
  if(IS_ABSOLUTE ${CMAKE_INSTALL_BINDIR})
    set(bindir "${CMAKE_INSTALL_BINDIR}")
  else()
    set(bindir "\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}")
  endif()
  # One scratch folder per destination: two installs of one build may run at once.
  install(CODE "
    set(TGS_INSTALL_FULL_BINDIR \"${bindir}\")
    string(MD5 _tgs_dest \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}\")
    configure_file(\"${template}\" \"${PROJECT_BINARY_DIR}/systemd/\${_tgs_dest}/${unit}\" @ONLY)
    file(INSTALL \"${PROJECT_BINARY_DIR}/systemd/\${_tgs_dest}/${unit}\"
         DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${TGS_INSTALL_SYSTEMD_UNITDIR}\")
  " COMPONENT node)
endfunction()
