# SPDX-License-Identifier: Apache-2.0
# CPack settings for tgs's Debian packages (`cpack -G DEB` in the build folder): one package per
# install component (cmake/TgsInstall.cmake), split as Debian splits such projects, so that a GPU
# node installs the daemon without the simulator or Python, and nothing but python3-tgs asks for
# Python at all:
#   tgs-node     tgs-node, libtgs-intercept.so, tgs-node.service, tgs-device-plugin, tgs-dra-plugin,
#                their man pages
#   tgs-sim      tgs-sim and its man page
#   libtgs-dev   the policy headers and the CMake package (find_package(tgs)); architecture all
#   python3-tgs  the Python module tgs, for the python3 it was built with
# Each holds only its own files under /usr and its copyright, and depends on none of the others:
# tgs-sim and python3-tgs link the simulator statically, the headers need only a compiler.
# The library dependencies of the programs are found by dpkg-shlibdeps.
set(TGS_PACKAGE_CONTACT "tgs developers" CACHE STRING "Maintainer field of the Debian packages (name <address>)")
set(CPACK_PACKAGE_NAME tgs)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_CONTACT "${TGS_PACKAGE_CONTACT}")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# The debug info stays in the build; the packages get stripped programs.
set(CPACK_STRIP_FILES ON)

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS OFF)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

# tgs_debian_package(component package section "summary" "description line"...): the package of
# one install component, with its copyright (where Debian looks for it) and description.
function(tgs_debian_package component package section summary)
  string(TOUPPER ${component} c)
  set(CPACK_DEBIAN_${c}_PACKAGE_NAME ${package} PARENT_SCOPE)
  set(CPACK_DEBIAN_${c}_FILE_NAME DEB-DEFAULT PARENT_SCOPE)
  set(CPACK_DEBIAN_${c}_PACKAGE_SECTION ${section} PARENT_SCOPE)
  # dpkg's Description: the summary line, then the long one (CPack indents it).
  string(JOIN " " long ${ARGN})
  set(CPACK_DEBIAN_${c}_DESCRIPTION "${summary}\n${long}" PARENT_SCOPE)
  install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${package}
          RENAME copyright COMPONENT ${component})
endfunction()

# Only the components this build has files for (a sim-only build has no tgs-node package).
get_cmake_property(_tgs_components COMPONENTS)
list(REMOVE_ITEM _tgs_components Unspecified)
foreach(_tgs_component IN LISTS _tgs_components)
  if(NOT _tgs_component IN_LIST TGS_INSTALL_COMPONENTS)
    message(FATAL_ERROR "tgs: install component '${_tgs_component}' has no package (cmake/TgsPackage.cmake)")
  endif()
endforeach()
set(CPACK_COMPONENTS_ALL ${_tgs_components})

if(node IN_LIST _tgs_components)
  tgs_debian_package(node tgs-node admin "transparent GPU sharing: per-node daemon and interposer"
    "tgs lets a production training job share its GPU with opportunistic jobs, with no change"
    "to their code. This package holds tgs-node (the per-node daemon, with its systemd unit),"
    "libtgs-intercept.so (the LD_PRELOAD interposer jobs run under), tgs-device-plugin (the"
    "kubelet device plugin) and tgs-dra-plugin (the kubelet plugin of the DRA driver gpu.tgs.io)."
    "It needs no Python.")
  # Its postinst makes the group tgs-production with addgroup (docs/operator-guide.md).
  set(CPACK_DEBIAN_NODE_PACKAGE_DEPENDS "adduser")
  # Maintainer scripts that make the group and tell systemd about tgs-node.service.
  set(CPACK_DEBIAN_NODE_PACKAGE_CONTROL_EXTRA
      ${PROJECT_SOURCE_DIR}/cmake/deb/postinst ${PROJECT_SOURCE_DIR}/cmake/deb/prerm
      ${PROJECT_SOURCE_DIR}/cmake/deb/postrm)
endif()

if(sim IN_LIST _tgs_components)
  tgs_debian_package(sim tgs-sim science "transparent GPU sharing: simulator"
    "tgs-sim simulates transparent GPU sharing of deep-learning training: GPU pairs, mixed job"
    "streams and replays of cluster traces under every sharing policy, and the fit of its"
    "interference model. Its default tables are built in.")
endif()

if(dev IN_LIST _tgs_components)
  tgs_debian_package(dev libtgs-dev libdevel "transparent GPU sharing: policy headers"
    "The header-only C++20 policy library of tgs (rate control, memory policies, the"
    "simulator's observations) and its CMake package: find_package(tgs) gives tgs::tgs.")
  # Headers and CMake files only: the same package on every architecture.
  set(CPACK_DEBIAN_DEV_PACKAGE_ARCHITECTURE all)
  set(CPACK_DEBIAN_DEV_PACKAGE_SHLIBDEPS OFF)
  set(CPACK_DEBIAN_DEV_PACKAGE_SUGGESTS "cmake, g++ (>= 4:12)")
endif()

# The Python module runs on the python3 it was built for (its extension carries that version's
# ABI); its runs return numpy columns. matplotlib is only for tgs.plot (loaded on first use) and
# pandas only makes frames of results: both only suggested, so that no package pulls the plotting
# stack by default (apt installs Recommends).
if(python IN_LIST _tgs_components)
  tgs_debian_package(python python3-tgs python "transparent GPU sharing: Python module"
    "The Python module tgs: the simulator's runs (pairs, mixed, replay) with numpy results,"
    "the trace readers, every policy stepped by hand, and plots (tgs.plot, with matplotlib)."
    "It is for the distribution's python3; another interpreter does not see it.")
  string(REPLACE "." ";" _tgs_python_version ${TGS_PYTHON_VERSION})
  list(GET _tgs_python_version 0 _tgs_python_major)
  list(GET _tgs_python_version 1 _tgs_python_minor)
  math(EXPR _tgs_python_next "${_tgs_python_minor} + 1")
  set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS
      "python3 (>= ${TGS_PYTHON_VERSION}), python3 (<< ${_tgs_python_major}.${_tgs_python_next}), python3-numpy")
  set(CPACK_DEBIAN_PYTHON_PACKAGE_SUGGESTS "python3-matplotlib, python3-pandas")
endif()

# No test or fake-driver files: only what has an install rule is packaged.
include(CPack)
