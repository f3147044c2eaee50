# tests/cuda_emu/libs_tests.cmake — extra registrations for the emulated cuBLAS/cuBLASLt/NCCL tests
# (included by CMakeLists.txt, which builds every test_cublas*/test_nccl* file and runs the NCCL
# tests under mpirun -np 2). NCCL is also run with 3 ranks: with 2, a+b == b+a hides a reduction
# that is not in rank order, and chunk/block arithmetic meets an odd rank count only here.
foreach(name test_nccl)
  if(TARGET cuda_emu_${name})
    add_test(NAME cuda_emu.${name}_np3
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 3 --oversubscribe $<TARGET_FILE:cuda_emu_${name}>)
    set_tests_properties(cuda_emu.${name}_np3 PROPERTIES LABELS cuda_emu TIMEOUT 300 ENVIRONMENT
      "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;OMP_NUM_THREADS=1")
  endif()
endforeach()

# The issue-order check (nccl_check.cpp): two communicators shared by 2 ranks, used in one order
# (must pass) and crossed (the check must end the job with its message).
add_executable(cuda_emu_issue_order_fixture issue_order_fixture.cpp)
target_link_libraries(cuda_emu_issue_order_fixture PRIVATE cuda_emu)
foreach(mode same crossed)
  add_test(NAME cuda_emu.issue_order_${mode}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 --oversubscribe
                   $<TARGET_FILE:cuda_emu_issue_order_fixture> ${mode})
  set_tests_properties(cuda_emu.issue_order_${mode} PROPERTIES LABELS cuda_emu TIMEOUT 60 ENVIRONMENT
    "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;OMP_NUM_THREADS=1")
endforeach()
set_tests_properties(cuda_emu.issue_order_same PROPERTIES PASS_REGULAR_EXPRESSION "same order: ok")
set_tests_properties(cuda_emu.issue_order_crossed PROPERTIES PASS_REGULAR_EXPRESSION
  "NCCL issue order differs between world ranks [01] and [01]: world rank [01] issued ncclRecv")
