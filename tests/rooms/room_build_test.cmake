# tests/rooms/room_build_test.cmake — ctest app_room_build (tests/rooms/CMakeLists.txt): a planted
# forbidden include fails the build itself, not only the checker.
#
#   cmake -DREPO=<repo> -DWORK=<scratch dir> -DGENERATOR=<generator> -P room_build_test.cmake
#
# Writes a project of two rooms declared with cmake/rooms.cmake's llmtrain_app_room, as app/CMakeLists.txt
# declares app/'s: "low" (app/low/) and "high" (app/high/, ROOMS low), and a layer room declared with
# llmtrain_room over a library of its own, as cmake/layers.cmake declares model/: "model" (model/,
# ALLOWED model/). It must build as written; then app/low/low.cpp gets `#include "app/high/high.hpp"`
# (a room including the room above it) and model/m.cpp `#include "app/low/low.hpp"` (a layer calling
# up), and building llmtrain_app_low, then probe_model, must fail with the checker's line naming the
# file, line, include and rule. Errors: FATAL_ERROR naming the step and the build's output.
cmake_minimum_required(VERSION 3.25)

set(_src ${WORK}/src)
set(_bin ${WORK}/build)
file(REMOVE_RECURSE ${WORK})
file(WRITE ${_src}/CMakeLists.txt "cmake_minimum_required(VERSION 3.25)
project(room_probe CXX)
add_library(llmtrain_root INTERFACE)
target_include_directories(llmtrain_root INTERFACE \${CMAKE_SOURCE_DIR})
include(${REPO}/cmake/rooms.cmake)
llmtrain_app_room(low OWNS app/low/ GLOBS \${CMAKE_SOURCE_DIR}/app/low/*.cpp \${CMAKE_SOURCE_DIR}/app/low/*.hpp)
llmtrain_app_room(high OWNS app/high/ GLOBS \${CMAKE_SOURCE_DIR}/app/high/*.cpp \${CMAKE_SOURCE_DIR}/app/high/*.hpp
  ROOMS low)
add_library(probe_model STATIC model/m.cpp)
target_link_libraries(probe_model PUBLIC llmtrain_root)
llmtrain_room(model GLOBS \${CMAKE_SOURCE_DIR}/model/*.cpp ALLOWED model/ TARGETS probe_model)
")
file(WRITE ${_src}/app/low/low.hpp "#pragma once\nint low();\n")
file(WRITE ${_src}/app/low/low.cpp "#include \"app/low/low.hpp\"\nint low() { return 1; }\n")
file(WRITE ${_src}/app/high/high.hpp "#pragma once\nint high();\n")
file(WRITE ${_src}/model/m.cpp "int m() { return 2; }\n")
file(WRITE ${_src}/app/high/high.cpp "#include \"app/high/high.hpp\"\n#include \"app/low/low.hpp\"\nint high() { return low() + 1; }\n")

execute_process(COMMAND ${CMAKE_COMMAND} -S ${_src} -B ${_bin} -G ${GENERATOR} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out
                ERROR_VARIABLE _out)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "the probe project does not configure:\n${_out}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${_bin} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "the probe project as written (no forbidden include) does not build:\n${_out}")
endif()
message(STATUS "two rooms, each including only its own and the room below: builds")

file(APPEND ${_src}/app/low/low.cpp "#include \"app/high/high.hpp\"\n")
execute_process(COMMAND ${CMAKE_COMMAND} --build ${_bin} --target llmtrain_app_low RESULT_VARIABLE _rc
                OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
set(_want "${_src}/app/low/low.cpp:3: #include \"app/high/high.hpp\" — room 'low' may include only: app/low/")
string(FIND "${_out}" "${_want}" _at)
if(_rc EQUAL 0 OR _at LESS 0)
  message(FATAL_ERROR "a forbidden include planted in app/low/low.cpp: expected the build to fail with\n  ${_want}\n"
                      "got exit ${_rc}:\n${_out}")
endif()
message(STATUS "app/low/low.cpp including app/high/high.hpp: the build of llmtrain_app_low fails:\n${_want}")

file(APPEND ${_src}/model/m.cpp "#include \"app/low/low.hpp\"\n")
execute_process(COMMAND ${CMAKE_COMMAND} --build ${_bin} --target probe_model RESULT_VARIABLE _rc
                OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
set(_want "${_src}/model/m.cpp:2: #include \"app/low/low.hpp\" — room 'model' may include only: model/\n")
string(FIND "${_out}" "${_want}" _at)
if(_rc EQUAL 0 OR _at LESS 0)
  message(FATAL_ERROR "a forbidden include planted in model/m.cpp: expected the build to fail with\n  ${_want}"
                      "got exit ${_rc}:\n${_out}")
endif()
message(STATUS "model/m.cpp including app/low/low.hpp: the build of probe_model fails:\n${_want}")
