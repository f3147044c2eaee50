# tests/rooms/room_check_test.cmake — ctest app_room_check (tests/rooms/CMakeLists.txt).
#
#   cmake -DROOMS_DIR=<build>/app/rooms -DCHECK=cmake/room_check.cmake -DSOURCE_DIR=<repo>
#         -DWORK=<scratch dir> -P room_check_test.cmake
#
# 1. Every room's rules (ROOMS_DIR/*.rules.cmake, the build's own) pass on the real tree.
# 2. No file of app/, model/, optim/, parallel/ or data/ includes one of tests/, tools/ or emu/.
# 3. Planted: a copy of a room's file under WORK with one #include appended, checked with that
#    room's rules: a forbidden include must fail (non-zero exit) with the line
#    "<copy>:<line>: #include "<include>" — room '<room>' may include only: ..."; an allowed one
#    must pass. Errors: FATAL_ERROR naming the case and the checker's output.
cmake_minimum_required(VERSION 3.25)

file(GLOB _rules ${ROOMS_DIR}/*.rules.cmake)
list(LENGTH _rules _n)
if(_n LESS 8)
  message(FATAL_ERROR "expected the 8 rooms' rules in ${ROOMS_DIR}, found ${_n}: ${_rules}")
endif()
foreach(_r IN LISTS _rules)
  execute_process(COMMAND ${CMAKE_COMMAND} -DRULES=${_r} -P ${CHECK} RESULT_VARIABLE _rc ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "the real tree fails ${_r}:\n${_err}")
  endif()
endforeach()
message(STATUS "the real tree passes the ${_n} rooms' rules")

# No product file (app/, model/, optim/, parallel/, data/) includes a file of tests/, tools/ or emu/: the
# same checker over all of them, with the product folders as the allowed list.
file(GLOB_RECURSE _product ${SOURCE_DIR}/app/*.[ch]pp ${SOURCE_DIR}/model/*.[ch]pp ${SOURCE_DIR}/model/*.cu
     ${SOURCE_DIR}/model/*.cuh ${SOURCE_DIR}/optim/*.[ch]pp ${SOURCE_DIR}/parallel/*.[ch]pp ${SOURCE_DIR}/data/*.[ch]pp)
file(WRITE ${WORK}/product.rules.cmake "set(ROOM \"product\")\nset(ROOM_FILES \"${_product}\")\n"
     "set(ROOM_ALLOWED \"app/;model/;optim/;parallel/;data/\")\n")
execute_process(COMMAND ${CMAKE_COMMAND} -DRULES=${WORK}/product.rules.cmake -P ${CHECK} RESULT_VARIABLE _rc
                ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "a product file includes a file outside the product folders:\n${_err}")
endif()
list(LENGTH _product _np)
message(STATUS "none of the ${_np} product files includes a file of tests/, tools/ or emu/")

# plant(<room> <file in the repo> <include> <expect: FAIL or PASS>)
function(plant room file include expect)
  set(_copy ${WORK}/${file})
  file(READ ${SOURCE_DIR}/${file} _text)
  file(WRITE ${_copy} "${_text}\n#include \"${include}\"\n")
  file(READ ${_copy} _all)
  string(REGEX MATCHALL "\n" _nl "${_all}")
  list(LENGTH _nl _line)  # the planted line is the last one, ended by the last newline
  execute_process(COMMAND ${CMAKE_COMMAND} -DRULES=${ROOMS_DIR}/${room}.rules.cmake -DFILES=${_copy} -P ${CHECK}
                  RESULT_VARIABLE _rc ERROR_VARIABLE _err)
  set(_want "${_copy}:${_line}: #include \"${include}\" — room '${room}' may include only: ")
  string(FIND "${_err}" "${_want}" _at)
  if(expect STREQUAL "FAIL" AND (_rc EQUAL 0 OR _at LESS 0))
    message(FATAL_ERROR "planted '${include}' in ${file} (room ${room}): expected a failure with\n  ${_want}\n"
                        "got exit ${_rc}:\n${_err}")
  elseif(expect STREQUAL "PASS" AND NOT _rc EQUAL 0)
    message(FATAL_ERROR "planted '${include}' in ${file} (room ${room}): expected a pass, got:\n${_err}")
  endif()
  message(STATUS "${room}: #include \"${include}\" in ${file}: ${expect} as expected")
endfunction()

plant(config app/config/cli.hpp app/trainer.hpp FAIL)                 # up into app/'s top
plant(config app/config/config.cpp app/checkpoint/checkpoint.hpp FAIL)  # up into a room above
plant(checkpoint app/checkpoint/saver.hpp app/config/config.hpp FAIL)   # a checkpoint records values
plant(interop app/interop/safetensors.hpp app/state/model_state.hpp FAIL)  # the old top <-> interop circle
plant(report app/report/run_log.hpp app/eval/hellaswag_eval.hpp FAIL)  # the old top <-> eval circle
plant(top app/trainer.hpp emu/device_ptx.hpp FAIL)                     # nor the emulator (emu/)
plant(top app/trainer.hpp tests/cuda/cuda_test_util.hpp FAIL)         # no product file includes a test file
plant(plan app/plan/plan.hpp tools/anything.hpp FAIL)
plant(checkpoint app/checkpoint/saver.hpp app/report/run_log.hpp PASS) # a room below it
plant(eval app/eval/hellaswag.hpp app/interop/pretrained.hpp PASS)
