// parallel/topology.cpp — rank coordinates and group lists (see topology.hpp).
#include "parallel/topology.hpp"

#include <stdexcept>

namespace llmtrain {

Topology::Topology(int world_size, int world_rank, int pp, int zero_group_size, int tp, int cp)
    : world_(world_size), rank_(world_rank), pp_(pp), tp_(tp), cp_(cp) {
    if (world_ < 1 || rank_ < 0 || rank_ >= world_)
        throw std::invalid_argument("Topology: rank " + std::to_string(rank_) + " outside world of " +
                                    std::to_string(world_));
    if (pp_ < 1 || world_ % pp_ != 0)
        throw std::invalid_argument("parallel.pp: expected a divisor of the world size " + std::to_string(world_) +
                                    ", got " + std::to_string(pp_));
    if (tp_ < 1 || (world_ / pp_) % tp_ != 0)
        throw std::invalid_argument("parallel.tp: expected a divisor of world size / pp = " +
                                    std::to_string(world_ / pp_) + ", got " + std::to_string(tp_));
    dp_ = world_ / (pp_ * tp_);
    if (cp_ < 1 || dp_ % cp_ != 0)
        throw std::invalid_argument("parallel.cp: expected a divisor of world size / (pp x tp) = " + std::to_string(dp_) +
                                    ", got " + std::to_string(cp_));
    zg_ = zero_group_size == 0 ? dp_ : zero_group_size;
    if (zg_ < 1 || zg_ > dp_ || dp_ % zg_ != 0)
        throw std::invalid_argument("parallel.zero_group_size: expected 0 or a divisor of dp = " + std::to_string(dp_) +
                                    ", got " + std::to_string(zero_group_size));
}

int Topology::rank_of(int stage, int replica, int zero_index, int tp_index) const {
    return tp_index + tp_ * (zero_index + zg_ * (replica + replicas() * stage));
}

std::vector<int> Topology::zero_group() const {
    std::vector<int> g;
    for (int z = 0; z < zg_; ++z) g.push_back(rank_of(stage(), replica(), z, tp_index()));
    return g;
}

std::vector<int> Topology::replica_group() const {
    std::vector<int> g;
    for (int r = 0; r < replicas(); ++r) g.push_back(rank_of(stage(), r, zero_index(), tp_index()));
    return g;
}

std::vector<int> Topology::stage_group() const {
    std::vector<int> g;
    for (int s = 0; s < pp_; ++s) g.push_back(rank_of(s, replica(), zero_index(), tp_index()));
    return g;
}

std::vector<int> Topology::dp_group() const {
    std::vector<int> g;
    for (int d = 0; d < dp_; ++d) g.push_back(rank_of(stage(), d / zg_, d % zg_, tp_index()));
    return g;
}

std::vector<int> Topology::tp_group() const {
    std::vector<int> g;
    for (int t = 0; t < tp_; ++t) g.push_back(rank_of(stage(), replica(), zero_index(), t));
    return g;
}

std::vector<int> Topology::cp_group() const {
    std::vector<int> g;
    for (int d = data_index() * cp_; d < (data_index() + 1) * cp_; ++d)
        g.push_back(rank_of(stage(), d / zg_, d % zg_, tp_index()));
    return g;
}

std::vector<int> Topology::ep_group(int ep) const {
    if (ep < 1 || dp_ % ep != 0)
        throw std::invalid_argument("parallel.ep: expected a divisor of the data-parallel ranks dp = " +
                                    std::to_string(dp_) + ", got " + std::to_string(ep));
    std::vector<int> g;
    const int first = dp_index() / ep * ep;
    for (int d = first; d < first + ep; ++d) g.push_back(rank_of(stage(), d / zg_, d % zg_, tp_index()));
    return g;
}

std::string Topology::describe() const {
    auto list = [](const std::vector<int>& g, char open, char close) {
        std::string s(1, open);
        for (size_t i = 0; i < g.size(); ++i) {
            if (i > 0) s += ',';
            s += std::to_string(g[i]);
        }
        s += close;
        return s;
    };
    std::string s = "world " + std::to_string(world_) + " = pp " + std::to_string(pp_) + " x dp " + std::to_string(dp_) +
                    (tp_ > 1 ? " x tp " + std::to_string(tp_) : std::string()) +
                    (cp_ > 1 ? " (" + std::to_string(dp_ / cp_) + " data x cp " + std::to_string(cp_) + ")" : std::string()) +
                    " (" + std::to_string(replicas()) +
                    " replicas x zero_group_size " + std::to_string(zg_) + ")";
    std::string zg = "; ZeRO groups", rg = "; replica groups", tg = "; TP groups";
    for (int st = 0; st < pp_; ++st)
        for (int r = 0; r < replicas(); ++r) {
            std::vector<int> g;
            for (int z = 0; z < zg_; ++z) g.push_back(rank_of(st, r, z));
            zg += ' ';
            zg += list(g, '[', ']');
        }
    for (int st = 0; st < pp_; ++st)
        for (int z = 0; z < zg_; ++z) {
            std::vector<int> g;
            for (int r = 0; r < replicas(); ++r) g.push_back(rank_of(st, r, z));
            rg += ' ';
            rg += list(g, '(', ')');
        }
    for (int st = 0; st < pp_; ++st)
        for (int r = 0; r < replicas(); ++r)
            for (int z = 0; z < zg_; ++z) {
                std::vector<int> g;
                for (int t = 0; t < tp_; ++t) g.push_back(rank_of(st, r, z, t));
                tg += ' ';
                tg += list(g, '{', '}');
            }
    return s + zg + rg + (tp_ > 1 ? tg : std::string());
}

}  // namespace llmtrain
