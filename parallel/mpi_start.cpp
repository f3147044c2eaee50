// parallel/mpi_start.cpp — MPI's start-up and end, this rank's place in the world (parallel/comm.hpp):
// MPI initialized once with FUNNELED threads (every MPI call from the main thread), the nodes found
// right after (parallel/nodes.hpp), finalized only if we initialized it.
#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <stdexcept>
#include <string>

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
    discover_nodes();  // collective: every rank calls mpi_init_once at start
}

void mpi_finalize() {
    if (g_we_initialized && mpi_active()) MPI_Finalize();
}

void mpi_abort(int code) {
    if (mpi_active() && world_size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
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

int local_rank() {
    for (const char* var : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
        const char* v = std::getenv(var);
        if (!v || !*v) continue;
        char* end = nullptr;
        const long r = std::strtol(v, &end, 10);
        if (*end != '\0' || r < 0 || r > INT_MAX)
            throw std::runtime_error(std::string("local_rank: environment variable ") + var + " = \"" + v +
                                     "\" is not a non-negative integer");
        return int(r);
    }
    return 0;
}

}  // namespace llmtrain
