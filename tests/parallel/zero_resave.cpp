// tests/parallel/zero_resave.cpp — resumes a checkpoint under this run's world and ZeRO stage and
// saves it again at once, for zero_reshard.sh: every value the new sharding loaded must come back
// out unchanged. Usage (under mpirun): zero_resave <checkpoint dir> [--set section.key=value]...
#include <cstdio>
#include <string>
#include <vector>

#include "app/config/config.hpp"
#include "app/trainer.hpp"

using namespace llmtrain;

int main(int argc, char** argv) {
    mpi_init_once(&argc, &argv);
    if (argc < 2) {
        std::fprintf(stderr, "usage: zero_resave <checkpoint dir> [--set k=v]...\n");
        return 2;
    }
    std::vector<std::string> sets;
    for (int i = 2; i + 1 < argc; i += 2) sets.push_back(argv[i + 1]);
    int code = 0;
    try {
        Config cfg = load_config("", sets);
        cfg.parallel.dp = world_size();
        resolve_batch(cfg, cfg.parallel.dp);
        auto comm = make_mpi_comm();
        RunLog log(world_rank() == 0);
        Trainer t(cfg, run_shape(cfg, world_size()), *comm);  // the run's shape, as main builds it
        log.line(t.resume_from(argv[1]));
        const std::string dir = t.save_checkpoint(log);
        if (world_rank() == 0) std::printf("resaved %s\n", dir.c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "zero_resave: %s\n", e.what());
        code = 1;
    }
    mpi_finalize();
    return code;
}
