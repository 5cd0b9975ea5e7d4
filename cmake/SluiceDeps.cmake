# Every third-party dependency, found from Debian packages (see scripts/install-deps.sh).
find_package(Threads REQUIRED)
find_package(absl REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(libjpeg-turbo REQUIRED)

# Debian splits OpenCV into per-module packages without the CMake config file, so the
# three modules we use are located directly.
find_path(OpenCV_INCLUDE_DIR opencv2/core.hpp PATH_SUFFIXES opencv4 REQUIRED)
foreach(m core imgproc imgcodecs)
  find_library(OpenCV_${m}_LIBRARY opencv_${m} REQUIRED)
  add_library(opencv::${m} SHARED IMPORTED)
  set_target_properties(opencv::${m} PROPERTIES IMPORTED_LOCATION ${OpenCV_${m}_LIBRARY}
                        INTERFACE_INCLUDE_DIRECTORIES ${OpenCV_INCLUDE_DIR})
endforeach()

find_package(PNG REQUIRED)

if(SLUICE_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
