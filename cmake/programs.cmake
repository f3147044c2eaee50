# cmake/programs.cmake — which backend and which Comm go into which program (docs/design.md
# "Programs" has the table). Included by the top-level CMakeLists.txt after every folder defined its
# targets. The CPU backend (model/cpu) and MpiComm are in every program (llmtrain_model,
# llmtrain_parallel); the CUDA backend and the device Comms are OBJECT libraries each program links
# or not: model/backend.cpp and parallel/comm.cpp find make_cuda_backend / make_nccl_comm /
# make_mpi_cuda_comm through weak references, so a program without them refuses run.backend = "cuda"
# (or parallel.comm = "nccl") with a message instead of failing to link.
#   cuda          llmtrain_cuda       the nvcc build of model/cuda (a CUDA toolkit was found)
#   cuda_emu      llmtrain_cuda_emu   the same sources by g++ against emu/, the CPU device
#   nccl          llmtrain_nccl       NcclComm on libnccl (nvcc builds where libnccl was found)
#   mpi_cuda      llmtrain_mpi_cuda   MpiCudaComm (parallel.comm = "mpi" on cuda)
#   nccl_emu, mpi_cuda_emu            the same two against emu/ (NCCL over MPI)
# A name whose library this build has not (no toolkit, no libnccl) is left out; an -emu program is
# declared only where the emulator is built. The programs under tools/ (llmtrain-prep, llmc_shard:
# data/ only, no backend; the benchmarks in tools/bench) are declared in their folders.
if(NOT TARGET llmtrain_app)
  return()  # a tree without app/'s sources: no programs
endif()
set(_app ${CMAKE_SOURCE_DIR}/app)

# llmtrain_program(<program> <room> <main.cpp> [BACKENDS <cuda|cuda_emu>...] [COMMS <comm>...])
# A program of app/'s room <room> (llmtrain_app_main) linking the named backends' and Comms'
# libraries, each only where this build has it, written to <build>/app/. Errors: FATAL_ERROR for a name not in the list above.
function(llmtrain_program program room main)
  cmake_parse_arguments(P "" "" "BACKENDS;COMMS" ${ARGN})
  set(_libs "")
  foreach(_name IN LISTS P_BACKENDS P_COMMS)
    if(NOT _name MATCHES "^(cuda|cuda_emu|nccl|mpi_cuda|nccl_emu|mpi_cuda_emu)$")
      message(FATAL_ERROR "llmtrain_program(${program}): unknown backend or Comm '${_name}'")
    endif()
    if(TARGET llmtrain_${_name})
      list(APPEND _libs llmtrain_${_name})
    endif()
  endforeach()
  llmtrain_app_main(${program} ${room} ${main} ${_libs})
  # Where the programs have always been: <build>/app/llmtrain (the README, tools/gpu/bundle.sh).
  set_target_properties(${program} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/app)
endfunction()

# llmtrain: the trainer. The nvcc backend with NCCL and MpiCudaComm where this build has them.
llmtrain_program(llmtrain top ${_app}/main.cpp BACKENDS cuda COMMS nccl mpi_cuda)
# llmtrain-plan: the pipeline planner; --profile times layers on the backend it links. No device
# Comm: profiling runs on one device.
llmtrain_program(llmtrain-plan plan ${_app}/plan/plan_main.cpp BACKENDS cuda)
# llmtrain-eval: val loss and HellaSwag on a checkpoint or GPT-2 weights, on one device.
llmtrain_program(llmtrain-eval eval ${_app}/eval/eval_main.cpp BACKENDS cuda)
# llmtrain-export: a checkpoint as a HuggingFace or llm.c model file: no device at all.
llmtrain_program(llmtrain-export interop ${_app}/interop/export_main.cpp)

# The -emu programs: the same mains on the CPU device (emu/), for the tests that run the CUDA code
# end to end without a GPU (tests/cuda's emu_*.sh, plan_profile_cuda, tests/app/hellaswag_test.py).
if(TARGET llmtrain_cuda_emu)
  llmtrain_program(llmtrain-emu top ${_app}/main.cpp BACKENDS cuda_emu COMMS nccl_emu mpi_cuda_emu)
  llmtrain_program(llmtrain-plan-emu plan ${_app}/plan/plan_main.cpp BACKENDS cuda_emu)
  llmtrain_program(llmtrain-eval-emu eval ${_app}/eval/eval_main.cpp BACKENDS cuda_emu)
endif()
