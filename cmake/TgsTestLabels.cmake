# SPDX-License-Identifier: Apache-2.0
# Test labels, so a developer can run the suite in pieces (`ctest -L unit`); every test has one
# of these kinds (the test labels.every-test-has-a-kind checks it):
#   unit        in-process tests and command-line checks; seconds in all
#   e2e         tgs-node, the interposer and fake training jobs against the fake driver
#   containers  podman, runc and kubectl run the CDI devices and manifests for real
#   python      the Python module
#   scripts     the GPU harness's and the results scripts' own tests
#   install     the installed tree, the packages and the other build configurations
set(TGS_TEST_KINDS unit e2e containers python scripts install)

# tgs_label_tests(<regex> <label>...): adds the labels to every test this directory has defined
# with add_test so far whose name matches the regex. (GoogleTest suites discovered at build time
# take theirs from gtest_discover_tests' PROPERTIES LABELS instead.)
function(tgs_label_tests regex)
  get_property(tests DIRECTORY PROPERTY TESTS)
  set(matching "")
  foreach(t IN LISTS tests)
    if(t MATCHES "${regex}")
      list(APPEND matching ${t})
    endif()
  endforeach()
  if(matching)
    set_property(TEST ${matching} APPEND PROPERTY LABELS ${ARGN})
  endif()
endfunction()
