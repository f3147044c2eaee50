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
