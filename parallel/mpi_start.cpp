// parallel/mpi_start.cpp — MPI's start-up and end, this rank's place in the world (parallel/comm.hpp):
// MPI initialized once with FUNNELED threads (every MPI call from the main thread; other threads —
// checkpoint writers, loaders, run_busy's worker — make none), the nodes found right after
// (parallel/nodes.hpp), finalized only if we initialized it. The local rank is the rank's index on
// its node in that node map, whatever the launcher (no environment variable is read).
#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "parallel/comm.hpp"
#include "parallel/nodes.hpp"

namespace llmtrain {

namespace {

bool g_we_initialized = false;

}  // namespace

bool mpi_active() {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

void mpi_init_once(int* argc, char*** argv) {
    int init = 0;
    MPI_Initialized(&init);
    if (init) return;
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        throw CommError("MPI: MPI_Init_thread failed");
    g_we_initialized = true;
    if (provided < MPI_THREAD_FUNNELED)
        throw CommError("MPI: MPI_Init_thread gave thread level " + std::to_string(provided) +
                        " (MPI_THREAD_SINGLE); llmtrain needs MPI_THREAD_FUNNELED: its other threads (checkpoint "
                        "writers, loaders, run_busy) make no MPI calls but must be allowed to exist");
    discover_nodes();  // collective: every rank calls mpi_init_once at start
}

void mpi_finalize() {
    if (!g_we_initialized || !mpi_active()) return;
    close_liveness_channel();  // no ping or pong left unmatched (parallel/nodes.hpp)
    MPI_Finalize();
}

void mpi_abort(int code) {
    if (mpi_active() && world_size() > 1) {
#ifdef MPICH_VERSION
        // Hydra forwards what the rank just wrote (its "llmtrain: error:" line) before the abort
        // tears the job down: it drops what it has not forwarded yet. (OpenMPI's mpirun does not.)
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
#endif
        MPI_Abort(MPI_COMM_WORLD, code);
    }
    std::exit(code);
}

int world_rank() {
    if (!mpi_active()) return 0;
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

int world_size() {
    if (!mpi_active()) return 1;
    int s = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &s);
    return s;
}

int local_rank() { return mpi_active() ? node_map().local_index(world_rank()) : 0; }

}  // namespace llmtrain
