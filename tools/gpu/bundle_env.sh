# shellcheck shell=bash
# tools/gpu/bundle_env.sh — sourced (bash): bundle_env DIR CUDA_LIBDIRS exports the environment the
# unpacked bundle of tools/gpu/bundle.sh runs in. DIR is the unpacked llmtrain-gpu folder,
# CUDA_LIBDIRS a ':'-separated list of the folders holding the target's cudart, cuBLASLt and cuDNN.
# Used by tools/gpu/run.sh on the GPU machine and by tests/cuda/bundle_test.sh in its chroot.
bundle_env() {
    local dir=$1 cuda_libdirs=$2
    export LD_LIBRARY_PATH=$dir/lib:$cuda_libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    # Open MPI loads its plugins and help texts from the bundle. A singleton (plain llmtrain) starts
    # no orted; the bundle's mpirun (openmpi/bin, on PATH) forks the ranks of this one node itself
    # (plm isolated: no ssh/rsh agent is looked for).
    export OMPI_MCA_mca_base_component_path=$dir/openmpi/plugins OPAL_PKGDATADIR=$dir/openmpi/share
    export OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_plm=isolated PATH=$dir/openmpi/bin:$PATH
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
}
