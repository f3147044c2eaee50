// parallel/planner.cpp — the planner's MIP over GLPK and its exhaustive twin (parallel/planner.hpp).
#include "parallel/planner.hpp"

#include <glpk.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

namespace llmtrain {

namespace {

/// The relative gap at which solve_plan stops (planner.hpp).
constexpr double kMipGap = 1e-6;

void check_problem(const PlanProblem& p, const char* who) {
    const int P = int(p.stages.size());
    if (P < 1) throw std::invalid_argument(std::string(who) + ": expected at least one stage, got none");
    if (p.n_layer < P)
        throw std::invalid_argument(std::string(who) + ": expected at least one layer per stage, got " +
                                    std::to_string(p.n_layer) + " layers for " + std::to_string(P) + " stages");
    if (p.micro_batches < 1)
        throw std::invalid_argument(std::string(who) + ": expected micro_batches >= 1, got " +
                                    std::to_string(p.micro_batches));
}

}  // namespace

double plan_objective(const PlanProblem& p, const std::vector<int>& layers, const std::vector<int>& ckpt) {
    const size_t P = p.stages.size();
    if (layers.size() != P || ckpt.size() != P)
        throw std::invalid_argument("plan_objective: expected " + std::to_string(P) + " layer and checkpoint counts");
    double sum = 0, pace = 0, tail = 0;
    for (size_t s = 0; s < P; ++s) {
        const StageModel& st = p.stages[s];
        const double t = st.forward(layers[s]) + st.backward(layers[s], ckpt[s]);
        sum += t;
        pace = std::max(pace, t);
        tail = std::max(tail, st.tail(layers[s]));
    }
    return sum + (p.micro_batches - 1) * pace + tail;
}

PlanChoice solve_plan(const PlanProblem& p) {
    check_problem(p, "solve_plan");
    const int P = int(p.stages.size()), L = p.n_layer, nmax = L - P + 1;
    // Rows and columns in units near 1 for the simplex: memory as a share of the cap, seconds over
    // tau (the largest per-layer time), so no coefficient is 1e10 beside one of 1e-4.
    double tau = 0;
    for (const StageModel& st : p.stages)
        tau = std::max({tau, st.fwd_layer + st.bwd_layer, st.recompute, st.fwd0 + st.bwd0, st.tail_layer, st.tail0});
    if (!(tau > 0)) tau = 1;
    const double cap = p.memory_cap > 0 ? p.memory_cap : 1;

    std::unique_ptr<glp_prob, void (*)(glp_prob*)> lp(glp_create_prob(), glp_delete_prob);
    glp_prob* g = lp.get();
    glp_set_obj_dir(g, GLP_MIN);
    // Columns (1-based): n_s = 1 + s, c_s = 1 + P + s, T = 2P + 1, U = 2P + 2, z_s = 2P + 3 + s.
    glp_add_cols(g, 3 * P + 2);
    const int colT = 2 * P + 1, colU = 2 * P + 2, colZ = 2 * P + 3;
    for (int s = 0; s < P; ++s) {
        const StageModel& st = p.stages[s];
        glp_set_col_kind(g, 1 + s, GLP_IV);
        glp_set_col_bnds(g, 1 + s, nmax > 1 ? GLP_DB : GLP_FX, 1, nmax);  // GLPK refuses GLP_DB with lb == ub
        glp_set_obj_coef(g, 1 + s, (st.fwd_layer + st.bwd_layer) / tau);
        glp_set_col_kind(g, 1 + P + s, GLP_IV);
        glp_set_col_bnds(g, 1 + P + s, GLP_DB, 0, nmax);
        glp_set_obj_coef(g, 1 + P + s, st.recompute / tau);
        glp_set_col_kind(g, colZ + s, GLP_BV);
    }
    glp_set_col_bnds(g, colT, GLP_LO, 0, 0);
    glp_set_obj_coef(g, colT, p.micro_batches - 1);
    glp_set_col_bnds(g, colU, GLP_LO, 0, 0);
    glp_set_obj_coef(g, colU, 1);

    std::vector<int> ia{0}, ja{0};  // GLPK's triplets are 1-based: element 0 unused
    std::vector<double> ar{0};
    auto put = [&](int row, int col, double v) {
        ia.push_back(row);
        ja.push_back(col);
        ar.push_back(v);
    };
    // Row 1: Σ n_s = L. Per stage s, rows 2 + 5s ..: c_s − n_s <= 0; memory <= cap; T >= t_s;
    // U >= tail_s; c_s − nmax·z_s <= 0.
    glp_add_rows(g, 1 + 5 * P);
    glp_set_row_bnds(g, 1, GLP_FX, L, L);
    for (int s = 0; s < P; ++s) put(1, 1 + s, 1);
    for (int s = 0; s < P; ++s) {
        const StageModel& st = p.stages[s];
        const int r = 2 + 5 * s;
        glp_set_row_bnds(g, r, GLP_UP, 0, 0);
        put(r, 1 + P + s, 1);
        put(r, 1 + s, -1);
        glp_set_row_bnds(g, r + 1, GLP_UP, 0, 1 - st.mem0 / cap);
        put(r + 1, 1 + s, st.mem_layer / cap);
        put(r + 1, 1 + P + s, st.mem_ckpt / cap);
        put(r + 1, colZ + s, st.mem_recompute / cap);
        glp_set_row_bnds(g, r + 2, GLP_LO, (st.fwd0 + st.bwd0) / tau, 0);
        put(r + 2, colT, 1);
        put(r + 2, 1 + s, -(st.fwd_layer + st.bwd_layer) / tau);
        put(r + 2, 1 + P + s, -st.recompute / tau);
        glp_set_row_bnds(g, r + 3, GLP_LO, st.tail0 / tau, 0);
        put(r + 3, colU, 1);
        put(r + 3, 1 + s, -st.tail_layer / tau);
        glp_set_row_bnds(g, r + 4, GLP_UP, 0, 0);
        put(r + 4, 1 + P + s, 1);
        put(r + 4, colZ + s, -nmax);
    }
    glp_load_matrix(g, int(ia.size()) - 1, ia.data(), ja.data(), ar.data());

    glp_iocp parm;
    glp_init_iocp(&parm);
    parm.msg_lev = GLP_MSG_OFF;
    parm.presolve = GLP_ON;  // solves the LP relaxation itself; reports an infeasible one as GLP_ENOPFS
    // Mixed-integer rounding and Gomory cuts tighten the relaxation's weak max rows (T >= t_s), and
    // the search stops within kMipGap (relative) of its bound: without them, 16-stage problems of
    // Llama 3 8B at a 131,072-token window ran branch and bound for minutes (a 74-row plan over
    // 10 minutes); with them the plan takes 15 s here and picks the same rows as at gap 0.
    parm.mir_cuts = GLP_ON;
    parm.gmi_cuts = GLP_ON;
    parm.mip_gap = kMipGap;
    const int rc = glp_intopt(g, &parm);
    PlanChoice out;
    if (rc == GLP_ENOPFS || rc == GLP_ENODFS) return out;
    if (rc != 0 && rc != GLP_EMIPGAP)
        throw std::runtime_error("solve_plan: GLPK glp_intopt failed with code " + std::to_string(rc));
    const int status = glp_mip_status(g);
    if (status == GLP_NOFEAS) return out;
    if (status != GLP_OPT && !(rc == GLP_EMIPGAP && status == GLP_FEAS))
        throw std::runtime_error("solve_plan: GLPK ended with MIP status " + std::to_string(status) +
                                 " (expected an optimum within the gap, or infeasibility)");
    for (int s = 0; s < P; ++s) {
        out.layers.push_back(int(std::lround(glp_mip_col_val(g, 1 + s))));
        out.ckpt.push_back(int(std::lround(glp_mip_col_val(g, 1 + P + s))));
        // GLPK's tolerances are relative (1e-7): hold the rounded integers to the exact cap.
        if (p.stages[s].memory(out.layers[s], out.ckpt[s]) > p.memory_cap)
            throw std::runtime_error("solve_plan: GLPK's solution exceeds the memory cap at stage " +
                                     std::to_string(s) + " by more than its tolerance");
    }
    out.feasible = true;
    out.objective = plan_objective(p, out.layers, out.ckpt);
    return out;
}

PlanChoice solve_plan_exhaustive(const PlanProblem& p) {
    check_problem(p, "solve_plan_exhaustive");
    const int P = int(p.stages.size());
    PlanChoice best;
    std::vector<int> layers(P), ckpt(P);
    // Depth-first over stages: the layer count of stage s, then every checkpointed count of every stage.
    auto ckpts = [&](auto&& self, int s) -> void {
        if (s == P) {
            const double obj = plan_objective(p, layers, ckpt);
            if (!best.feasible || obj < best.objective) best = {true, layers, ckpt, obj};
            return;
        }
        for (int c = 0; c <= layers[s]; ++c) {
            if (p.stages[s].memory(layers[s], c) > p.memory_cap) continue;
            ckpt[s] = c;
            self(self, s + 1);
        }
    };
    auto split = [&](auto&& self, int s, int left) -> void {
        if (s == P - 1) {
            layers[s] = left;
            ckpts(ckpts, 0);
            return;
        }
        for (int n = 1; n <= left - (P - 1 - s); ++n) {
            layers[s] = n;
            self(self, s + 1, left - n);
        }
    };
    split(split, 0, p.n_layer);
    return best;
}

double ring_allreduce_seconds(double bytes, int ranks, double link_gbps) {
    if (ranks < 1 || bytes < 0 || !(link_gbps > 0))
        throw std::invalid_argument("ring_allreduce_seconds: expected ranks >= 1, bytes >= 0 and a positive link "
                                    "bandwidth, got " + std::to_string(ranks) + ", " + std::to_string(bytes) + ", " +
                                    std::to_string(link_gbps) + " GB/s");
    return 2.0 * (ranks - 1) / ranks * bytes / (link_gbps * 1e9);
}

}  // namespace llmtrain
