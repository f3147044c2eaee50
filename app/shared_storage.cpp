// app/shared_storage.cpp — the start-up check that every rank sees rank 0's run_dir (see
// shared_storage.hpp).
#include "app/shared_storage.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "app/config/config.hpp"
#include "parallel/nodes.hpp"

namespace llmtrain {

void check_shared_run_dir(const std::string& run_dir, Comm& comm) {
    namespace fs = std::filesystem;
    if (comm.size() <= 1) return;
    const fs::path dir(run_dir), token_file = dir / ".llmtrain-shared-storage-check";
    std::string token, failure;  // failure: rank 0 could not write (then nobody checks)
    bool made = false;
    if (comm.rank() == 0) {
        std::error_code ec;
        made = !fs::exists(dir, ec);
        fs::create_directories(dir, ec);
        std::random_device rd;
        std::ostringstream t;
        char host[256] = {0};
        gethostname(host, sizeof host - 1);
        t << std::hex << rd() << rd() << rd() << rd() << " written by rank 0 on " << host;
        token = t.str();
        std::ofstream f(token_file, std::ios::trunc);
        f << token;
        f.close();
        if (ec || !f) failure = "run dir '" + run_dir + "': rank 0 cannot write '" + token_file.string() + "'";
    }
    broadcast_string(comm, failure);
    if (!failure.empty()) throw std::runtime_error(failure);
    broadcast_string(comm, token);
    std::string seen;
    {
        std::ifstream f(token_file);
        std::getline(f, seen);
    }
    // One byte per rank: 0 saw the token, 1 saw no file, 2 saw another file.
    uint8_t mine = seen == token ? 0 : seen.empty() ? 1 : 2;
    std::vector<uint8_t> all(comm.size());
    comm.all_gather(&mine, all.data(), 1, DType::u8);
    std::vector<int> missing, different;
    for (int i = 0; i < comm.size(); ++i) {
        if (all[i] == 1) missing.push_back(comm.world_ranks()[i]);
        if (all[i] == 2) different.push_back(comm.world_ranks()[i]);
    }
    if (comm.rank() == 0) {
        std::error_code ec;
        fs::remove(token_file, ec);
        if (made && (!missing.empty() || !different.empty())) fs::remove(dir, ec);  // only if still empty
    }
    if (missing.empty() && different.empty()) return;
    std::string why;
    if (!missing.empty()) why += node_map().where(missing) + " do not see it";
    if (!different.empty()) why += (why.empty() ? "" : "; ") + node_map().where(different) + " see another file there";
    throw ConfigError("run.run_dir = '" + run_dir + "': rank 0 wrote '" + token_file.filename().string() +
                      "' there and " + why +
                      ": every rank must see the same run_dir (shared storage: NFS, Lustre, ...), not a node-local "
                      "directory such as /tmp; nothing was written");
}

}  // namespace llmtrain
