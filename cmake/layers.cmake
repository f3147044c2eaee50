# cmake/layers.cmake — the include rules of the layers below app/ (docs/design.md "Rooms the build
# enforces"), checked as part of their libraries' builds by cmake/rooms.cmake's llmtrain_room: a file
# of a room naming in an #include a path of app/, model/, optim/, parallel/, data/, emu/, tests/ or
# tools/ that its ALLOWED list does not allow stops the build with
#   <file>:<line>: #include "x" — room '<room>' may include only: <ALLOWED>
# Included by the top-level CMakeLists.txt after every folder defined its targets (app/'s rooms are
# declared in app/CMakeLists.txt). The folders' READMEs and design.md's "Layers" give the reasons.
set(_src ${CMAKE_SOURCE_DIR})
set(_cuda_targets llmtrain_cuda llmtrain_cuda_emu llmtrain_cuda_emu_racecheck)

# model/: the model above Ops. backend.* (the factory) is the one file naming both backends.
llmtrain_room(model GLOBS ${_src}/model/*.cpp ${_src}/model/*.hpp ${_src}/model/*.h
  ALLOWED model/ TARGETS llmtrain_model)
# model/cpu: the reference backend; it does not reach into the CUDA backend.
llmtrain_room(model/cpu GLOBS ${_src}/model/cpu/*.cpp ${_src}/model/cpu/*.hpp
  ALLOWED model/ !model/cuda/ TARGETS llmtrain_model)
# model/cuda: the CUDA backend, built by nvcc and by g++ against the emulator. It names CUDA's own
# headers only (the emulator comes in through the prelude, never through an include of emu/).
llmtrain_room(model/cuda GLOBS ${_src}/model/cuda/*.cu ${_src}/model/cuda/*.cuh ${_src}/model/cuda/*.hpp
  ${_src}/model/cuda/*.cpp ALLOWED model/ !model/cpu/ TARGETS ${_cuda_targets})
# optim/: the optimizer over the model's flat buffers; host AdamW runs the CPU backend's kernel.
llmtrain_room(optim GLOBS ${_src}/optim/*.cpp ${_src}/optim/*.hpp
  ALLOWED optim/ model/ !model/cuda/ TARGETS llmtrain_optim)
# parallel/: ranks, groups, collectives, ZeRO, the pipeline; it sees the model through model/'s
# interfaces (Ops, GPT, ParamStore, ParamLayout), never a backend's files.
llmtrain_room(parallel GLOBS ${_src}/parallel/*.cpp ${_src}/parallel/*.hpp
  ALLOWED parallel/ model/ !model/cpu/ !model/cuda/
  TARGETS llmtrain_parallel llmtrain_nccl llmtrain_nccl_emu llmtrain_mpi_cuda llmtrain_mpi_cuda_emu)
# data/: token datasets and tokenizers; nothing of ours above it.
llmtrain_room(data GLOBS ${_src}/data/*.cpp ${_src}/data/*.hpp ALLOWED data/ TARGETS llmtrain_data)
# emu/: the CPU device; of ours only model/fp8.hpp (the FP8 codes its cuBLASLt decodes).
if(CUDA_EMU_AVAILABLE)
  llmtrain_room(emu GLOBS ${_src}/emu/*.cpp ${_src}/emu/*.hpp ALLOWED emu/ model/fp8.hpp
    TARGETS cuda_emu cuda_emu_racecheck)
endif()
