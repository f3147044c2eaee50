// tests/comm/comm_contract.cpp — the CommContract fixture's references and checks, and the cases on
// results: all-reduce, reduce-scatter and all-gather in and out of place, broadcast from the first and
// the last rank, all_to_all_v with uneven counts, and every operation over many segments. What the suite is and its tolerances:
// tests/comm/comm_contract.hpp. The cases on handles, rings, groups and counters:
// comm_contract_flow.cpp.
#include "tests/comm/comm_contract.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/backend.hpp"
#include "parallel/mpi_comm_testing.hpp"

namespace llmtrain::commtest {
namespace {

/// World rank r's input number `salt`: n floats of mixed sign and magnitude.
std::vector<float> input_of(int r, size_t n, int salt) {
    std::mt19937_64 g(1000 + r + 7919 * salt);
    std::vector<float> x(n);
    for (auto& v : x) {
        double mant = double(g() % 2000001) / 1e6 - 1.0;  // [-1, 1]
        int ex = int(g() % 17) - 8;
        v = float(std::ldexp(mant, ex));
    }
    return x;
}

float bits_to_f32(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

/// Nearest bf16 to x (ties to even mantissa), chosen by distance in double.
uint16_t nearest_bf16(float x) {
    const uint16_t lo = uint16_t(std::bit_cast<uint32_t>(x) >> 16), hi = uint16_t(lo + 1);  // |lo| <= |x| <= |hi|
    const double dlo = std::fabs(double(x) - bits_to_f32(lo)), dhi = std::fabs(double(x) - bits_to_f32(hi));
    if (dlo != dhi) return dlo < dhi ? lo : hi;
    return (lo & 1) ? hi : lo;
}

/// Element i of a buffer of t (f32 or bf16) as a float.
float element(const Bytes& b, size_t i, DType t) {
    if (t == DType::f32) {
        float v;
        std::memcpy(&v, &b[4 * i], 4);
        return v;
    }
    uint16_t h;
    std::memcpy(&h, &b[2 * i], 2);
    return bits_to_f32(h);
}

const char* dtype_name(DType t) { return t == DType::f32 ? "f32" : t == DType::bf16 ? "bf16" : "u8"; }

}  // namespace

Bytes input_bytes(int r, size_t n, DType t, int salt) {
    const auto x = input_of(r, n, salt);
    Bytes b(n * dtype_size(t));
    for (size_t i = 0; i < n; ++i) {
        uint32_t u;
        std::memcpy(&u, &x[i], 4);
        if (t == DType::f32) std::memcpy(&b[4 * i], &x[i], 4);
        if (t == DType::bf16) {
            uint16_t h = uint16_t(u >> 16);  // truncated: a bf16 value
            std::memcpy(&b[2 * i], &h, 2);
        }
        if (t == DType::u8) b[i] = uint8_t(std::lround(std::fabs(x[i]) * 1000));
    }
    return b;
}

std::vector<Bytes> inputs_of_group(const Comm& comm, size_t n, DType t, int salt) {
    std::vector<Bytes> all;
    for (int w : comm.world_ranks()) all.push_back(input_bytes(w, n, t, salt));
    return all;
}

long first_diff(const uint8_t* a, const uint8_t* b, size_t n, DType t) {
    const size_t es = dtype_size(t);
    for (size_t i = 0; i < n; ++i)
        if (std::memcmp(a + i * es, b + i * es, es) != 0) return long(i);
    return -1;
}

std::vector<Bytes> halved(std::vector<Bytes> in, DType t) {
    for (Bytes& b : in)
        for (size_t i = 0; i < b.size() / dtype_size(t); ++i) {
            const float h = 0.5f * element(b, i, t);
            if (t == DType::f32) {
                std::memcpy(&b[4 * i], &h, 4);
            } else {
                uint32_t u;
                std::memcpy(&u, &h, 4);
                const uint16_t v = uint16_t(u >> 16);  // exact: a halved bf16 is a bf16
                std::memcpy(&b[2 * i], &v, 2);
            }
        }
    return in;
}

// ---- the fixture ----

CommContract::~CommContract() {
    ops->synchronize();
    for (void* p : bufs_) ops->free(p);
}

std::unique_ptr<Ops> CommContract::make_backend_for(const std::string& precision) const {
    return make_backend(kind.backend, precision);
}

void* CommContract::alloc(size_t bytes) {
    bufs_.push_back(ops->malloc(bytes == 0 ? 1 : bytes));
    return bufs_.back();
}

void* CommContract::put(const Bytes& h) {
    void* p = alloc(h.size());
    put_into(p, h);
    return p;
}

void CommContract::put_into(void* dst, const Bytes& h) {
    kept_.push_back(std::make_unique<Bytes>(h));
    if (!h.empty()) ops->memcpy_h2d(dst, kept_.back()->data(), h.size());
}

Bytes CommContract::get(const void* p, size_t bytes) {
    Bytes h(bytes);
    if (bytes > 0) ops->memcpy_d2h(h.data(), p, bytes);
    ops->synchronize();
    return h;
}

void CommContract::expect_sum(const std::string& what, const Bytes& got, const std::vector<Bytes>& in, DType t,
                              size_t first, size_t n) {
    SCOPED_TRACE(what + " " + dtype_name(t) + " n=" + std::to_string(n) + " on " + kind.name + ", world rank " +
                 std::to_string(me));
    const size_t es = dtype_size(t);
    const int P = int(in.size());
    const double tol = t == DType::f32 ? 1e-6 : P / 256.0;
    ASSERT_EQ(got.size(), n * es);
    Bytes want(n * es);  // the rank-order sum
    long bad_bits = -1, bad_tol = -1, bad_exact = -1;
    for (size_t j = 0; j < n; ++j) {
        const size_t i = first + j;
        float acc = 0;
        double exact = 0, mag = 0;
        for (int r = 0; r < P; ++r) {
            const float v = element(in[r], i, t);
            acc = r == 0 ? v : acc + v;
            exact += v, mag += std::fabs(v);
        }
        if (t == DType::f32) {
            std::memcpy(&want[4 * j], &acc, 4);
        } else {
            const uint16_t h = nearest_bf16(acc);
            std::memcpy(&want[2 * j], &h, 2);
        }
        const double g = element(got, j, t), w = element(want, j, t);
        if (bad_tol < 0 && !(std::fabs(g - w) <= tol * mag)) bad_tol = long(j);
        if (t == DType::f32 && bad_exact < 0 && !(std::fabs(g - exact) <= 1e-6 * mag)) bad_exact = long(j);
    }
    if (traits.rank_order_sums) bad_bits = first_diff(got.data(), want.data(), n, t);
    EXPECT_EQ(bad_bits, -1) << "first element not the rank-order sum bit for bit";
    EXPECT_EQ(bad_tol, -1) << "first element further than " << tol << " * sum |x| from the rank-order sum"
                           << (bad_tol >= 0 ? ": got " + std::to_string(element(got, bad_tol, t)) + ", want " +
                                                  std::to_string(element(want, bad_tol, t))
                                            : std::string());
    EXPECT_EQ(bad_exact, -1) << "first element further than 1e-6 * sum |x| from the double sum";
}

void CommContract::check_all_reduce(Comm& comm, size_t n, DType t) {
    const auto all = inputs_of_group(comm, n, t);
    void* buf = put(all[comm.rank()]);
    comm.all_reduce_sum(buf, n, t);
    expect_sum("all_reduce", get(buf, n * dtype_size(t)), all, t, 0, n);
}

void CommContract::check_reduce_scatter(Comm& comm, const std::vector<Bytes>& all, size_t n, DType t,
                                        bool in_place) {
    const int r = comm.rank();
    const size_t es = dtype_size(t);
    uint8_t* send = static_cast<uint8_t*>(put(all[r]));
    void* out = in_place ? send + r * n * es : alloc(n * es);  // in place: NCCL's layout
    comm.reduce_scatter_sum(send, out, n, t);
    expect_sum(std::string("reduce_scatter ") + (in_place ? "in place" : "out of place"), get(out, n * es), all, t,
               r * n, n);
}

void CommContract::check_reduce_scatter(Comm& comm, size_t n, DType t, bool in_place) {
    check_reduce_scatter(comm, inputs_of_group(comm, comm.size() * n, t), n, t, in_place);
}

void CommContract::check_all_gather(Comm& comm, const std::vector<Bytes>& all, size_t n, DType t, bool in_place) {
    SCOPED_TRACE("all_gather n=" + std::to_string(n) + " " + dtype_name(t) + (in_place ? " in place" : " out of place"));
    const int P = comm.size(), r = comm.rank();
    const size_t es = dtype_size(t);
    void* send = put(all[r]);
    uint8_t* recv = static_cast<uint8_t*>(put(Bytes(P * n * es, 0xAB)));
    if (in_place) ops->memcpy_d2d(recv + r * n * es, send, n * es);  // queued: the block already in place
    comm.all_gather(in_place ? recv + r * n * es : send, recv, n, t);
    const Bytes got = get(recv, P * n * es);
    for (int q = 0; q < P; ++q) EXPECT_EQ(first_diff(got.data() + q * n * es, all[q].data(), n, t), -1) << "block " << q;
}

void CommContract::check_all_gather(Comm& comm, size_t n, DType t, bool in_place) {
    check_all_gather(comm, inputs_of_group(comm, n, t), n, t, in_place);
}

void CommContract::check_broadcast(Comm& comm, size_t n, DType t, int root) {
    SCOPED_TRACE("broadcast n=" + std::to_string(n) + " " + dtype_name(t) + " root=" + std::to_string(root));
    const Bytes want = input_bytes(comm.world_ranks()[root], n, t, 4);
    void* buf = put(comm.rank() == root ? want : input_bytes(comm.world_ranks()[comm.rank()], n, t, 5));
    comm.broadcast(buf, n, t, root);
    EXPECT_EQ(first_diff(get(buf, n * dtype_size(t)).data(), want.data(), n, t), -1);
}

bool CommContract::check_ring(Comm& comm, size_t n, DType t) {
    SCOPED_TRACE("ring n=" + std::to_string(n) + " " + dtype_name(t));
    const int P = comm.size(), r = comm.rank(), right = (r + 1) % P, left = (r + P - 1) % P;
    if (traits.serial_p2p && P == 1) return false;
    const int w = comm.world_ranks()[r], wl = comm.world_ranks()[left];
    const size_t es = dtype_size(t);
    void* in1 = alloc(n * es);
    void* in2 = alloc(n * es);
    void* out1 = put(input_bytes(w, n, t, 1));
    void* out2 = put(input_bytes(w, n, t, 2));
    std::vector<CommHandle> hs;
    auto recvs = [&] {
        hs.push_back(comm.recv_async(in1, n, t, left));
        hs.push_back(comm.recv_async(in2, n, t, left));
    };
    auto sends = [&] {
        hs.push_back(comm.send_async(out1, n, t, right));
        hs.push_back(comm.send_async(out2, n, t, right));
    };
    if (traits.serial_p2p && r == 0) {  // one after another: a chain that rank 0 starts
        sends();
        recvs();
    } else {  // MPI: every receive posted before any send
        recvs();
        sends();
    }
    for (size_t k = hs.size(); k-- > 0;) hs[k]->wait();  // in reverse
    EXPECT_EQ(first_diff(get(in1, n * es).data(), input_bytes(wl, n, t, 1).data(), n, t), -1) << "first message";
    EXPECT_EQ(first_diff(get(in2, n * es).data(), input_bytes(wl, n, t, 2).data(), n, t), -1) << "second message";
    return true;
}

// ---- cases: results ----

TEST_P(CommContract, AllReduceSumIsTheRankOrderSum) {
    auto comm = make();
    for (DType t : {DType::f32, DType::bf16})
        for (size_t n : {size_t(0), size_t(2), size_t(777), size_t(1001), size_t(65537)})  // uneven chunks
            check_all_reduce(*comm, n, t);
}

TEST_P(CommContract, ReduceScatterIsTheRankOrderSumInAndOutOfPlace) {
    auto comm = make();
    for (size_t n : {size_t(7), size_t(37), size_t(1000003)})
        for (DType t : {DType::f32, DType::bf16}) {
            const auto all = inputs_of_group(*comm, comm->size() * n, t);
            for (bool in_place : {false, true}) check_reduce_scatter(*comm, all, n, t, in_place);
        }
}

TEST_P(CommContract, AllGatherConcatenatesInAndOutOfPlace) {
    auto comm = make();
    for (size_t n : {size_t(7), size_t(29), size_t(1000003)})
        for (DType t : {DType::f32, DType::bf16, DType::u8}) {
            const auto all = inputs_of_group(*comm, n, t);
            for (bool in_place : {false, true}) check_all_gather(*comm, all, n, t, in_place);
        }
}

TEST_P(CommContract, BroadcastFromTheFirstAndTheLastRank) {
    auto comm = make();
    for (int root : {0, comm->size() - 1}) {
        check_broadcast(*comm, 100, DType::f32, root);
        check_broadcast(*comm, 100, DType::bf16, root);
        check_broadcast(*comm, 1001, DType::f32, root);
        check_broadcast(*comm, 300001, DType::u8, root);
    }
}

// all_to_all_v with uneven per-peer counts against a plain reference: group index s sends group
// index d (s + 2d + pattern) mod 5 · 37 elements (pattern 0 and 1: some blocks empty, the block to
// oneself among them on some ranks) or, in pattern 2, only its own block; block d of s's send is
// elements [Σ_{d'<d} count(s, d'), +count(s, d)) of s's input, so every rank knows what it must
// receive, back to back in group order. Over the world and the world reversed (group index ≠ world
// rank); f32, bf16 and u8. Moves: exact bits. One guard element past the blocks stays untouched. The
// stats count the bytes sent to the other ranks once, as all_to_all.
TEST_P(CommContract, AllToAllVMovesUnevenBlocksExactly) {
    for (bool reversed : {false, true}) {
        std::vector<int> ranks(static_cast<size_t>(W));
        for (int r = 0; r < W; ++r) ranks[size_t(r)] = reversed ? W - 1 - r : r;
        auto comm = make(ranks);
        const int P = comm->size(), gi = comm->rank();
        for (int pattern : {0, 1, 2})
            for (DType t : {DType::f32, DType::bf16, DType::u8}) {
                const size_t es = dtype_size(t);
                auto count = [&](int s, int d) {
                    if (pattern == 2) return s == d ? size_t(5 + s) : size_t(0);
                    return size_t((s + 2 * d + pattern) % 5) * 37;
                };
                std::vector<size_t> sc(static_cast<size_t>(P)), rc(static_cast<size_t>(P));
                size_t send_n = 0, recv_n = 0;
                uint64_t wire = 0;
                for (int q = 0; q < P; ++q) {
                    sc[size_t(q)] = count(gi, q), rc[size_t(q)] = count(q, gi);
                    send_n += sc[size_t(q)], recv_n += rc[size_t(q)];
                    if (q != gi) wire += sc[size_t(q)] * es;
                }
                Bytes want;
                for (int q = 0; q < P; ++q) {  // q's block for me: after its blocks for group indices < gi
                    size_t q_total = 0, off = 0;
                    for (int d = 0; d < P; ++d) q_total += count(q, d), off += d < gi ? count(q, d) : 0;
                    const Bytes in = input_bytes(ranks[size_t(q)], q_total, t, 40 + pattern);
                    want.insert(want.end(), in.begin() + long(off * es), in.begin() + long((off + rc[size_t(q)]) * es));
                }
                const Bytes guard(es, 0x5a);
                void* send = put(send_n > 0 ? input_bytes(me, send_n, t, 40 + pattern) : Bytes(es, 0));
                Bytes init(recv_n * es, 0xa5);
                init.insert(init.end(), guard.begin(), guard.end());
                void* recv = put(init);
                const uint64_t before = comm->stats().bytes[int(CommOp::all_to_all)];
                const uint64_t calls = comm->stats().calls[int(CommOp::all_to_all)];
                comm->all_to_all_v(send, sc.data(), recv, rc.data(), t);
                Bytes got = get(recv, (recv_n + 1) * es);
                const std::string what = std::string(reversed ? "reversed, " : "world, ") + "pattern " +
                                         std::to_string(pattern) + ", " + dtype_name(t);
                EXPECT_EQ(Bytes(got.end() - long(es), got.end()), guard) << what << ": wrote past the blocks";
                got.resize(recv_n * es);
                EXPECT_EQ(got, want) << what;
                EXPECT_EQ(comm->stats().bytes[int(CommOp::all_to_all)] - before, wire) << what;
                EXPECT_EQ(comm->stats().calls[int(CommOp::all_to_all)] - calls, 1u) << what;
            }
    }
}

// MpiComm (and MpiCudaComm, which runs one) cuts operations into segments of at most
// set_mpi_segment_elements per rank; with 3, every operation crosses many, some chunks empty.
// A Comm without segments runs the same small operations.
TEST_P(CommContract, EveryOperationIsCorrectAcrossManySegments) {
    set_mpi_segment_elements(3);
    auto comm = make();
    set_mpi_segment_elements(size_t(1) << 25);
    const int P = comm->size();
    for (size_t n : {size_t(7), size_t(9)}) {
        for (DType t : {DType::f32, DType::bf16}) {
            check_reduce_scatter(*comm, n, t, false);
            check_reduce_scatter(*comm, n, t, true);
            check_all_reduce(*comm, 4 * n + 1, t);  // segments of 3 over P ranks: some chunks empty
        }
        check_all_gather(*comm, n, DType::f32, false);
        check_all_gather(*comm, n, DType::bf16, true);
        check_broadcast(*comm, n, DType::u8, P - 1);
        check_ring(*comm, n, DType::f32);
    }
}

}  // namespace llmtrain::commtest
