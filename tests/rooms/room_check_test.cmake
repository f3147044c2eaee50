# tests/rooms/room_check_test.cmake — ctest app_room_check (tests/rooms/CMakeLists.txt).
#
#   cmake -DROOMS_DIR=<build>/rooms -DCHECK=cmake/room_check.cmake -DSOURCE_DIR=<repo>
#         -DWORK=<scratch dir> -P room_check_test.cmake
#
# 1. Every room's rules (ROOMS_DIR/*.rules.cmake, the build's own: app/'s 8 rooms and the layers of
#    cmake/layers.cmake) pass on the real tree.
# 2. No file of app/, model/, optim/, parallel/ or data/ includes one of tests/, tools/ or emu/.
# 3. Planted: a copy of a room's file under WORK with one #include appended, checked with that
#    room's rules: a forbidden include must fail (non-zero exit) with the line
#    "<copy>:<line>: #include "<include>" — room '<room>' may include only: ..."; an allowed one
#    must pass. Errors: FATAL_ERROR naming the case and the checker's output.
cmake_minimum_required(VERSION 3.25)

file(GLOB _rules ${ROOMS_DIR}/*.rules.cmake)
list(LENGTH _rules _n)
foreach(_room config report checkpoint interop state plan eval top model model_cpu model_cuda optim parallel data)
  if(NOT EXISTS ${ROOMS_DIR}/${_room}.rules.cmake)
    message(FATAL_ERROR "room '${_room}' has no rules in ${ROOMS_DIR} (found: ${_rules})")
  endif()
endforeach()
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

# plant(<room> <file in the repo> <include> <expect: FAIL or PASS> [<rule>])
# With <rule> a failure must print the whole line, rule included: "... may include only: <rule>".
function(plant room file include expect)
  string(REPLACE "/" "_" _rules_name "${room}")
  if(NOT EXISTS ${ROOMS_DIR}/${_rules_name}.rules.cmake)
    message(STATUS "${room}: no rules in this build (the emulator is not built): skipped")
    return()
  endif()
  set(_copy ${WORK}/${file})
  file(READ ${SOURCE_DIR}/${file} _text)
  file(WRITE ${_copy} "${_text}\n#include \"${include}\"\n")
  file(READ ${_copy} _all)
  string(REGEX MATCHALL "\n" _nl "${_all}")
  list(LENGTH _nl _line)  # the planted line is the last one, ended by the last newline
  execute_process(COMMAND ${CMAKE_COMMAND} -DRULES=${ROOMS_DIR}/${_rules_name}.rules.cmake -DFILES=${_copy} -P ${CHECK}
                  RESULT_VARIABLE _rc ERROR_VARIABLE _err)
  set(_want "${_copy}:${_line}: #include \"${include}\" — room '${room}' may include only: ${ARGV4}")
  if(ARGC GREATER 4)
    string(APPEND _want "\n")
  endif()
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
# The layers below app/ (cmake/layers.cmake): the whole line, rule included.
plant(model model/gpt.cpp parallel/comm.hpp FAIL "model/")                # the model does not call up
plant(model model/gpt.hpp app/trainer.hpp FAIL "model/")
plant(model/cpu model/cpu/matmul.cpp model/cuda/cuda_ops.hpp FAIL "model/ except model/cuda/")
plant(model/cuda model/cuda/gelu.cu emu/emu.hpp FAIL "model/ except model/cpu/")  # the emulator comes by the prelude
plant(parallel parallel/zero.cpp optim/adamw.hpp FAIL "parallel/ model/ except model/cpu/ except model/cuda/")
plant(parallel parallel/pipeline.hpp app/config/config.hpp FAIL "parallel/ model/ except model/cpu/ except model/cuda/")
plant(parallel parallel/mpi_comm.cpp model/cuda/cuda_ops.hpp FAIL "parallel/ model/ except model/cpu/ except model/cuda/")
plant(optim optim/adamw.cpp parallel/comm.hpp FAIL "optim/ model/ except model/cuda/")
plant(data data/loader.cpp model/ops.hpp FAIL "data/")
plant(emu emu/memory.cpp model/ops.hpp FAIL "emu/ model/fp8.hpp")
plant(parallel parallel/zero.cpp model/gpt.hpp PASS)                    # model/'s interfaces
plant(optim optim/host_adamw.cpp model/cpu/adamw_kernel.hpp PASS)       # the host step's kernel
plant(emu emu/cublas_gemm.cpp model/fp8.hpp PASS)
