# Test code (GoogleTest bodies and fixtures) is compiled without optimization: it is over half
# of a build's compile time, and nothing measures its speed. The code under test, in the module
# libraries, keeps the build type's optimization. The timing tests (tests/*_serial_test.cc)
# keep it too, since inline functions they instantiate may be the copies the linker keeps.
set(SLUICE_TEST_CODE_FLAGS "-O0" CACHE STRING "Compile options for test code (empty: the build type's)")
set(SLUICE_UNITY_TESTS 8 CACHE STRING "Test files compiled together in one unit (0: each alone)")
function(sluice_test_code target)
  target_compile_options(${target} PRIVATE ${SLUICE_TEST_CODE_FLAGS})
  if(SLUICE_UNITY_TESTS GREATER 0)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON
                                               UNITY_BUILD_BATCH_SIZE ${SLUICE_UNITY_TESTS})
  endif()
endfunction()

# sluice_module(NAME DEPS ...): one static library per module folder, built from every .cc
# in the folder and its subfolders except *_test.cc; the module's tests (*_test.cc) become
# one GoogleTest binary, sluice_<name>_test, registered with ctest under the label <name>
# (`ctest -L rpc` runs one module's tests).
function(sluice_module name)
  cmake_parse_arguments(ARG "" "" "DEPS;TEST_DEPS" ${ARGN})
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  set(lib_srcs "")
  set(test_srcs "")
  foreach(f ${srcs})
    if(f MATCHES "_test\\.cc$")
      list(APPEND test_srcs ${f})
    elseif(NOT f MATCHES "/main\\.cc$")
      list(APPEND lib_srcs ${f})
    endif()
  endforeach()
  add_library(sluice_${name} STATIC ${lib_srcs})
  add_library(sluice::${name} ALIAS sluice_${name})
  target_include_directories(sluice_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(sluice_${name} PUBLIC ${ARG_DEPS})
  if(SLUICE_BUILD_TESTS AND test_srcs)
    add_executable(sluice_${name}_test ${test_srcs})
    sluice_test_code(sluice_${name}_test)
    target_link_libraries(sluice_${name}_test PRIVATE sluice_${name} ${ARG_TEST_DEPS}
                          GTest::gtest GTest::gmock GTest::gtest_main)
    gtest_discover_tests(sluice_${name}_test DISCOVERY_TIMEOUT 60
                         PROPERTIES LABELS ${name}
                                    ENVIRONMENT "SLUICE_TEST_TMPDIR=${CMAKE_BINARY_DIR}/test-tmp")
  endif()
endfunction()
