// parallel/nodes.cpp — the node map (MPI's shared-memory split) and the texts that name ranks by node;
// see parallel/nodes.hpp. The liveness probe is in parallel/liveness.cpp.
#include "parallel/nodes.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>

#include "parallel/comm.hpp"

namespace llmtrain {

namespace {

NodeMap g_map;
bool g_found = false;

void check(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    throw CommError(std::string("MPI: ") + what + " failed (finding the nodes): " + std::string(msg, len));
}

std::string this_host() {
    char h[256] = {0};
    if (gethostname(h, sizeof h - 1) != 0) return "?";
    return h;
}

/// "2, 3" or "2-5" for consecutive runs.
std::string rank_list(const std::vector<int>& r) {
    std::string s;
    for (size_t i = 0; i < r.size();) {
        size_t j = i;
        while (j + 1 < r.size() && r[j + 1] == r[j] + 1) ++j;
        if (!s.empty()) s += ", ";
        s += std::to_string(r[i]);
        // Appended piece by piece: `", " + std::to_string(...)` trips GCC 12's false -Wrestrict.
        if (j >= i + 2) s.append("-").append(std::to_string(r[j]));
        else if (j == i + 1) s.append(", ").append(std::to_string(r[j]));
        i = j + 1;
    }
    return s;
}

}  // namespace

std::vector<int> NodeMap::ranks_on(int node) const {
    std::vector<int> r;
    for (int i = 0; i < int(node_of.size()); ++i)
        if (node_of[i] == node) r.push_back(i);
    return r;
}

bool NodeMap::uniform_blocks() const {
    const int W = int(node_of.size()), N = nodes();
    if (N == 0 || W % N != 0) return false;
    for (int i = 0; i < W; ++i)
        if (node_of[i] != i / (W / N)) return false;
    return true;
}

std::vector<int> NodeMap::nodes_of(const std::vector<int>& ranks) const {
    std::vector<int> n;
    for (int r : ranks)
        if (r >= 0 && r < int(node_of.size())) n.push_back(node_of[r]);
    std::sort(n.begin(), n.end());
    n.erase(std::unique(n.begin(), n.end()), n.end());
    return n;
}

std::string NodeMap::describe() const {
    const int W = int(node_of.size()), N = nodes();
    std::string s = "world " + std::to_string(W) + " on " + std::to_string(N) + (N == 1 ? " node" : " nodes");
    if (N <= 1) return s;
    std::vector<int> sizes;
    for (int n = 0; n < N; ++n) sizes.push_back(int(ranks_on(n).size()));
    if (std::all_of(sizes.begin(), sizes.end(), [&](int x) { return x == sizes[0]; }))
        return s + " (" + std::to_string(sizes[0]) + (sizes[0] == 1 ? " rank each)" : " ranks each)");
    std::string l;
    for (int x : sizes) l += (l.empty() ? "" : ", ") + std::to_string(x);
    return s + " (" + l + " ranks)";
}

std::string NodeMap::node_name(int node) const {
    if (node < 0 || node >= nodes()) return "node ?";
    return "node " + std::to_string(node) + " (" + host[node] + ")";
}

std::string NodeMap::where(const std::vector<int>& ranks) const {
    std::map<int, std::vector<int>> by;
    for (int r : ranks) by[r >= 0 && r < int(node_of.size()) ? node_of[r] : -1].push_back(r);
    std::string s;
    for (auto& [node, rs] : by) {
        if (!s.empty()) s += "; ";
        s += (rs.size() == 1 ? "rank " : "ranks ") + rank_list(rs) + " on " + node_name(node);
    }
    return s;
}

int NodeMap::local_index(int rank) const {
    if (rank < 0 || rank >= int(node_of.size()))
        throw std::out_of_range("NodeMap::local_index: rank " + std::to_string(rank) + " outside a world of " +
                                std::to_string(node_of.size()));
    int i = 0;
    for (int r = 0; r < rank; ++r) i += node_of[r] == node_of[rank];
    return i;
}

const NodeMap& node_map() {
    if (!g_found && g_map.host.empty()) {
        int init = 0, W = 1;
        MPI_Initialized(&init);
        if (init) MPI_Comm_size(MPI_COMM_WORLD, &W);
        g_map.node_of.assign(W, 0);
        g_map.host = {this_host()};
    }
    return g_map;
}

void discover_nodes() {
    int W = 1, me = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &W);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    open_liveness_channel();
    MPI_Comm local;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &local),
          "MPI_Comm_split_type");
    int lowest = me;  // a node is named by its lowest world rank
    check(MPI_Allreduce(MPI_IN_PLACE, &lowest, 1, MPI_INT, MPI_MIN, local), "MPI_Allreduce");
    MPI_Comm_free(&local);
    std::vector<int> lows(W);
    check(MPI_Allgather(&lowest, 1, MPI_INT, lows.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
    char name[MPI_MAX_PROCESSOR_NAME] = {0};
    int len = 0;
    MPI_Get_processor_name(name, &len);
    std::vector<char> names(size_t(W) * MPI_MAX_PROCESSOR_NAME);
    check(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                        MPI_COMM_WORLD),
          "MPI_Allgather");
    std::vector<int> sorted = lows;
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    g_map.node_of.resize(W);
    g_map.host.assign(sorted.size(), "");
    for (int r = 0; r < W; ++r) {
        const int node = int(std::lower_bound(sorted.begin(), sorted.end(), lows[r]) - sorted.begin());
        g_map.node_of[r] = node;
        if (r == lows[r]) g_map.host[node] = std::string(&names[size_t(r) * MPI_MAX_PROCESSOR_NAME]);
    }
    g_found = true;
}

}  // namespace llmtrain
