# SPDX-License-Identifier: Apache-2.0
# CPack settings for the Debian package `tgs` (`cpack -G DEB` in the build folder): everything
# `cmake --install` puts in place, under /usr, with its library dependencies found by
# dpkg-shlibdeps and maintainer scripts that tell systemd about tgs-node.service.
set(CPACK_PACKAGE_NAME tgs)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_DESCRIPTION
    "tgs lets a production training job share its GPU with opportunistic jobs, with no change to\n"
    "their code: tgs-node (per-node daemon, systemd unit), libtgs-intercept.so (LD_PRELOAD\n"
    "interposer), tgs-device-plugin (Kubernetes), tgs-sim (simulator), the Python module tgs\n"
    "and the policy headers.")
string(JOIN "" CPACK_PACKAGE_DESCRIPTION ${CPACK_PACKAGE_DESCRIPTION})
set(TGS_PACKAGE_CONTACT "tgs developers" CACHE STRING "Maintainer field of the Debian package (name <address>)")
set(CPACK_PACKAGE_CONTACT "${TGS_PACKAGE_CONTACT}")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# The debug info stays in the build; the package gets stripped programs.
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS OFF)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/cmake/deb/postinst ${PROJECT_SOURCE_DIR}/cmake/deb/prerm
    ${PROJECT_SOURCE_DIR}/cmake/deb/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

# The Python module, when built, runs on the python3 it was built for; its runs return numpy
# columns and tgs.plot draws with matplotlib, while pandas only makes frames of the results.
# tgs-node, the interposer and tgs-sim need none of them, so a GPU node need not carry Python:
# recommended (apt installs them by default), not required.
if(TARGET tgs_python)
  string(REPLACE "." ";" _tgs_python_version ${TGS_PYTHON_VERSION})
  list(GET _tgs_python_version 0 _tgs_python_major)
  list(GET _tgs_python_version 1 _tgs_python_minor)
  math(EXPR _tgs_python_next "${_tgs_python_minor} + 1")
  set(CPACK_DEBIAN_PACKAGE_RECOMMENDS
      "python3 (>= ${TGS_PYTHON_VERSION}), python3 (<< ${_tgs_python_major}.${_tgs_python_next}), python3-numpy, python3-matplotlib")
  set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3-pandas")
endif()

# No test or fake-driver files: only what has an install rule is packaged.
include(CPack)
