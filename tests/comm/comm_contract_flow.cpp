// tests/comm/comm_contract_flow.cpp — CommContract's cases on how operations flow: what a Comm says
// of its group, handles in flight waited in any order (and on the current stream for the device
// comms), test() saying true once a result is in place, send/recv rings, sub-groups in listed order, byte counters against the CommStats
// formulas, max of host values, barrier, abort, refused arguments. The suite, its references and
// tolerances: tests/comm/comm_contract.hpp; the cases on results: comm_contract.cpp.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "tests/comm/comm_contract.hpp"

namespace llmtrain::commtest {
namespace {

TEST_P(CommContract, DescribesItsGroup) {
    auto comm = make();
    std::vector<int> all(W);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(comm->rank(), me);
    EXPECT_EQ(comm->size(), W);
    EXPECT_EQ(comm->world_ranks(), all);
    EXPECT_EQ(comm->describe().rfind(traits.describe_prefix + "world ranks [", 0), 0u) << comm->describe();
    EXPECT_EQ(comm->host_timeout_s(), traits.host_timeout ? CommOptions{}.timeout_s : 0.0);
}

TEST_P(CommContract, HandlesInFlightTogetherCanBeWaitedInReverseOrder) {
    auto comm = make();
    const int P = comm->size(), r = comm->rank();
    const size_t na = 1001, nb = 501, nc = 777, nd = 3001;
    const auto a_in = inputs_of_group(*comm, P * na, DType::f32);
    const auto b_in = inputs_of_group(*comm, nb, DType::bf16);
    const auto c_in = inputs_of_group(*comm, nc, DType::bf16);
    const Bytes d_want = input_bytes(comm->world_ranks()[0], nd, DType::u8);
    void* a = put(a_in[r]);
    void* a_out = alloc(na * 4);
    void* b_send = put(b_in[r]);
    void* b = alloc(P * nb * 2);
    void* c = put(c_in[r]);
    void* d = put(r == 0 ? d_want : Bytes(nd, 0));
    auto ha = comm->reduce_scatter_sum_async(a, a_out, na, DType::f32);
    auto hb = comm->all_gather_async(b_send, b, nb, DType::bf16);
    auto hc = comm->all_reduce_sum_async(c, nc, DType::bf16);
    auto hd = comm->broadcast_async(d, nd, DType::u8, 0);
    hd->wait();
    hc->wait();
    hb->wait();
    ha->wait();
    ha->wait();  // idempotent
    expect_sum("reduce_scatter in flight", get(a_out, na * 4), a_in, DType::f32, r * na, na);
    const Bytes gathered = get(b, P * nb * 2);
    for (int q = 0; q < P; ++q)
        EXPECT_EQ(first_diff(gathered.data() + q * nb * 2, b_in[q].data(), nb, DType::bf16), -1) << "block " << q;
    expect_sum("all_reduce in flight", get(c, nc * 2), c_in, DType::bf16, 0, nc);
    EXPECT_EQ(first_diff(get(d, nd).data(), d_want.data(), nd, DType::u8), -1);
}

TEST_P(CommContract, DestroyingAnUnwaitedHandleWaits) {
    auto comm = make();
    const int P = comm->size();
    const auto in = inputs_of_group(*comm, 101, DType::f32);
    void* send = put(in[comm->rank()]);
    void* out = alloc(P * 101 * 4);
    { auto h = comm->all_gather_async(send, out, 101, DType::f32); }
    const Bytes got = get(out, P * 101 * 4);
    for (int q = 0; q < P; ++q) EXPECT_EQ(first_diff(got.data() + q * 404, in[q].data(), 101, DType::f32), -1) << q;
}

// The collective reads what the current stream produced before the call, and the handle's wait()
// orders later compute after it (on the CPU backend both hold trivially). At a device
// synchronization the emulator runs created streams newest first and the default stream last, so
// each missing event shows on one of the two compute streams: a stream created after the comm runs
// before the comm stream (a missing wait() lets the scale run first), the default stream after it (a
// missing input wait lets the sum read the buffer before the upload). Each precision's scale is the
// backend's own; halving is exact, so the result is the halved inputs' sum.
TEST_P(CommContract, AsyncHandleOrdersComputeOnTheCurrentStream) {
    for (const std::string& precision : kind.precisions) {
        auto b = make_backend_for(precision);
        const DType t = b->act_dtype();
        const size_t n = 64, bytes = n * dtype_size(t);
        auto comm = kind.make(*b, {}, {});
        const auto in = inputs_of_group(*comm, n, t);
        Stream created = b->create_stream();
        for (Stream compute : {created, Stream{nullptr}}) {
            b->set_stream(compute);
            void* buf = b->malloc(bytes);
            b->memcpy_h2d(buf, in[comm->rank()].data(), bytes);  // queued, not yet run
            CommHandle h = comm->all_reduce_sum_async(buf, n, t);
            h->wait();
            h->wait();                  // idempotent
            b->scale(buf, 0.5f, n);     // after the sum, on the compute stream
            Bytes got(bytes);
            b->memcpy_d2h(got.data(), buf, bytes);
            b->synchronize();
            expect_sum(precision + (compute ? " created stream" : " default stream"), got, halved(in, t), t, 0, n);
            b->free(buf);
        }
        b->set_stream(nullptr);
        b->destroy_stream(created);
    }
}

// test() moves an operation on without blocking and says true once wait() would return at once:
// the result is then in place, read here without wait(). Each kind of operation, one at a time.
TEST_P(CommContract, TestSaysTrueOnceTheResultIsThere) {
    if (!traits.test_completes) GTEST_SKIP() << kind.name << "'s test() always says false";
    auto comm = make();
    const int P = comm->size(), r = comm->rank();
    const size_t n = 1001;
    auto until_done = [&](CommWork& h, const char* what) {
        const auto t0 = std::chrono::steady_clock::now();
        while (!h.test()) {
            ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30)) << what << ": test() never true";
            std::this_thread::yield();
        }
        EXPECT_TRUE(h.test()) << what << ": test() stays true";
    };
    for (DType t : {DType::f32, DType::bf16}) {
        const size_t es = dtype_size(t);
        const auto in = inputs_of_group(*comm, n, t, 7);
        void* buf = put(in[r]);
        CommHandle h = comm->all_reduce_sum_async(buf, n, t);
        until_done(*h, "all_reduce_sum");
        expect_sum("all_reduce after test()", get(buf, n * es), in, t, 0, n);
        h->wait();
        const auto all = inputs_of_group(*comm, P * n, t, 8);
        void* send = put(all[r]);
        void* recv = alloc(n * es);
        h = comm->reduce_scatter_sum_async(send, recv, n, t);
        until_done(*h, "reduce_scatter_sum");
        expect_sum("reduce_scatter after test()", get(recv, n * es), all, t, r * n, n);
        void* gathered = alloc(P * n * es);
        h = comm->all_gather_async(buf, gathered, n, t);
        until_done(*h, "all_gather");
        const Bytes g = get(gathered, P * n * es), mine = get(buf, n * es);
        EXPECT_EQ(first_diff(g.data() + r * n * es, mine.data(), n, t), -1);
    }
}

TEST_P(CommContract, SendRecvRingDeliversMessagesInOrder) {
    auto comm = make();
    check_ring(*comm, 1, DType::u8);
    check_ring(*comm, 333, DType::u8);
    check_ring(*comm, 100003, DType::f32);
}

// Both directions of a ring posted before either is waited (as the pipeline posts its sends and
// receives), on two comms at once (the pipeline's activation and gradient links). Not for a
// serial_p2p Comm: its first receive would wait for a send queued behind it.
TEST_P(CommContract, SendRecvRingBothWaysOnTwoComms) {
    if (traits.serial_p2p) GTEST_SKIP() << kind.name << " runs its sends and receives in the order issued";
    auto comm = make(), other = make();
    const size_t n = 333;
    const int P = comm->size(), next = (me + 1) % P, prev = (me + P - 1) % P;
    for (DType t : {DType::f32, DType::bf16}) {
        const size_t es = dtype_size(t);
        void* out_a = put(input_bytes(me, n, t, 5));
        void* out_b = put(input_bytes(me, n, t, 6));
        void* in_a = alloc(n * es);
        void* in_b = alloc(n * es);
        CommHandle rb = other->recv_async(in_b, n, t, next);
        CommHandle sa = comm->send_async(out_a, n, t, next);
        CommHandle ra = comm->recv_async(in_a, n, t, prev);
        CommHandle sb = other->send_async(out_b, n, t, prev);
        for (CommHandle* h : {&ra, &rb, &sa, &sb}) (*h)->wait();
        EXPECT_EQ(get(in_a, n * es), input_bytes(prev, n, t, 5));
        EXPECT_EQ(get(in_b, n * es), input_bytes(next, n, t, 6));
    }
}

TEST_P(CommContract, SubGroupsFollowTheListedOrder) {
    if (W < 3) GTEST_SKIP() << "needs 3 ranks";
    // Group (2, 0) on ranks 0 and 2; every other rank alone.
    std::vector<int> ranks = me == 0 || me == 2 ? std::vector<int>{2, 0} : std::vector<int>{me};
    auto comm = make(ranks);
    EXPECT_EQ(comm->size(), int(ranks.size()));
    EXPECT_EQ(comm->world_ranks(), ranks);
    EXPECT_EQ(comm->rank(), me == 0 ? 1 : 0);  // world 2 is index 0, world 0 index 1
    float v[2] = {float(me + 1), 1.0f};
    void* buf = put(Bytes(reinterpret_cast<const uint8_t*>(v), reinterpret_cast<const uint8_t*>(v) + 8));
    comm->all_reduce_sum(buf, 2, DType::f32);
    const Bytes got = get(buf, 8);
    std::memcpy(v, got.data(), 8);
    EXPECT_EQ(v[0], ranks.size() == 1 ? float(me + 1) : 4.0f);  // (0+1) + (2+1)
    EXPECT_EQ(v[1], float(ranks.size()));
    check_reduce_scatter(*comm, 7, DType::f32, false);
    check_all_gather(*comm, 7, DType::bf16, true);
    check_broadcast(*comm, 11, DType::f32, 0);
}

// The even and the odd world ranks, each group listed in ascending and in descending order.
TEST_P(CommContract, EvenAndOddRankGroupsWorkSideBySide) {
    for (bool descending : {false, true}) {
        SCOPED_TRACE(descending ? "descending" : "ascending");
        std::vector<int> ranks;
        for (int r = me % 2; r < W; r += 2) ranks.push_back(r);
        if (descending) std::reverse(ranks.begin(), ranks.end());
        auto comm = make(ranks);
        EXPECT_EQ(comm->world_ranks(), ranks);
        EXPECT_EQ(comm->size(), int(ranks.size()));
        EXPECT_EQ(comm->rank(), int(std::find(ranks.begin(), ranks.end(), me) - ranks.begin()));
        check_reduce_scatter(*comm, 1001, DType::bf16, true);
        check_all_gather(*comm, 7, DType::f32, false);
        for (DType t : {DType::f32, DType::bf16})
            for (size_t n : {size_t(17), size_t(50), size_t(999)}) check_all_reduce(*comm, n, t);
        check_broadcast(*comm, 50, DType::f32, 0);   // the group's index 0: descending, the largest rank
        check_broadcast(*comm, 50, DType::bf16, 0);
        check_ring(*comm, 5, DType::bf16);
    }
}

// For P ranks and n elements of es bytes: all_reduce 2(P−1)/P·n·es, reduce_scatter and all_gather
// (P−1)/P·n·es with n the full length, broadcast n·es on the root, send n·es, recv 0; one rank
// sends nothing. First uneven lengths (the formulas' integer division), then lengths every rank
// count divides, where a transport that counts its own bytes (the emulated NCCL) must agree.
TEST_P(CommContract, ByteCountersFollowTheCommStatsFormulas) {
    auto comm = make();
    const uint64_t P = comm->size(), r = comm->rank();
    using BC = std::pair<uint64_t, uint64_t>;
    auto at = [&](CommOp op) { return BC(comm->stats().bytes[int(op)], comm->stats().calls[int(op)]); };
    uint8_t* buf = static_cast<uint8_t*>(put(Bytes(4 * 4 * 1001, 0)));
    comm->all_reduce_sum(buf, 1001, DType::f32);
    comm->all_reduce_sum(buf, 10, DType::bf16);
    comm->reduce_scatter_sum(buf, buf + r * 7 * 2, 7, DType::bf16);
    comm->all_gather(buf, buf + 4 * 1001, 5, DType::f32);
    comm->broadcast(buf, 100, DType::u8, int(P - 1));
    const bool ring = check_ring(*comm, 3, DType::f32);  // two sends and two receives of 3 fp32
    ops->synchronize();
    if (traits.flat_all_reduce_bytes)
        EXPECT_EQ(at(CommOp::all_reduce), BC(2 * (P - 1) * 1001 * 4 / P + 2 * (P - 1) * 10 * 2 / P, 2));
    EXPECT_EQ(at(CommOp::all_reduce).second, 2u);
    EXPECT_EQ(at(CommOp::reduce_scatter), BC((P - 1) * 7 * 2, 1));
    EXPECT_EQ(at(CommOp::all_gather), BC((P - 1) * 5 * 4, 1));
    EXPECT_EQ(at(CommOp::broadcast), BC(P > 1 && r == P - 1 ? 100 : 0, 1));
    EXPECT_EQ(at(CommOp::send), BC(P > 1 ? 2 * 3 * 4 : 0, ring ? 2 : 0));  // to itself: off the wire
    EXPECT_EQ(at(CommOp::recv), BC(0, ring ? 2 : 0));
    const CommStats& s = comm->stats();
    EXPECT_EQ(s.total_bytes(), std::accumulate(s.bytes.begin(), s.bytes.end(), uint64_t{0}));
    comm->reset_stats();
    EXPECT_EQ(comm->stats().total_bytes(), 0u);
    EXPECT_EQ(at(CommOp::all_reduce), BC(0, 0));

    const CommOp kinds[] = {CommOp::all_reduce, CommOp::reduce_scatter, CommOp::all_gather, CommOp::broadcast,
                            CommOp::send};
    const bool wire = bool(kind.wire_bytes);
    uint64_t before[5] = {};
    const uint64_t n = 60;  // divisible by 2, 3 and 4
    for (DType t : {DType::f32, DType::bf16}) {
        SCOPED_TRACE(t == DType::f32 ? "f32" : "bf16");
        const uint64_t es = dtype_size(t);
        void* a = put(Bytes(n * P * es, 0));
        void* b = alloc(n * P * es);
        comm->reset_stats();
        for (int k = 0; k < 5 && wire; ++k) before[k] = kind.wire_bytes(kinds[k]);
        comm->all_reduce_sum(a, n, t);
        comm->all_reduce_sum(a, n, t);
        comm->reduce_scatter_sum(a, b, n, t);
        comm->all_gather(a, b, n, t);
        comm->broadcast(a, n, t, 0);
        if (P > 1) {  // a pair: rank 0 sends n bytes to rank 1
            if (r == 0) comm->send(a, n, DType::u8, 1);
            if (r == 1) comm->recv(b, n, DType::u8, 0);
        }
        ops->synchronize();
        if (traits.flat_all_reduce_bytes) EXPECT_EQ(at(CommOp::all_reduce), BC(2 * (2 * (P - 1) * n * es / P), 2));
        EXPECT_EQ(at(CommOp::all_reduce).second, 2u);
        EXPECT_EQ(at(CommOp::reduce_scatter), BC((P - 1) * n * es, 1));
        EXPECT_EQ(at(CommOp::all_gather), BC((P - 1) * n * es, 1));
        EXPECT_EQ(at(CommOp::broadcast), BC(r == 0 && P > 1 ? n * es : 0, 1));
        EXPECT_EQ(at(CommOp::send), BC(r == 0 && P > 1 ? n : 0, r == 0 && P > 1 ? 1 : 0));
        EXPECT_EQ(at(CommOp::recv), BC(0, r == 1 ? 1 : 0));
        for (int k = 0; k < 5 && wire; ++k) {
            EXPECT_EQ(comm->stats().bytes[int(kinds[k])], kind.wire_bytes(kinds[k]) - before[k])
                << comm_op_name(kinds[k]) << ": the transport's own count, rank " << r;
        }
    }
}

TEST_P(CommContract, AllReduceMaxOfHostValuesAndBarrier) {
    auto comm = make();
    const int P = comm->size();
    std::vector<float> v = {float(me), -float(me), 0.5f, 1.5f * me - 2.0f};
    comm->all_reduce_max(v.data(), v.size());
    EXPECT_EQ(v, (std::vector<float>{float(P - 1), 0.0f, 0.5f, 1.5f * (P - 1) - 2.0f}));
    std::vector<float> big(5000, float(me));  // grows any staging buffers
    comm->all_reduce_max(big.data(), big.size());
    EXPECT_EQ(big, std::vector<float>(5000, float(P - 1)));
    comm->barrier();
}

TEST_P(CommContract, AbortMakesLaterCallsFail) {
    if (!traits.aborts) GTEST_SKIP() << kind.name << "'s abort() does nothing: its own waits time out";
    auto doomed = make();
    doomed->abort();
    doomed->abort();  // idempotent
    void* d = alloc(4 * 4);
    EXPECT_THROW(doomed->all_reduce_sum(d, 4, DType::f32), CommError);
    EXPECT_THROW(doomed->barrier(), CommError);
}

TEST_P(CommContract, BadArgumentsAreRejected) {
    EXPECT_THROW(make({me, me}), std::invalid_argument);
    EXPECT_THROW(make({W}), std::invalid_argument);
    EXPECT_THROW(make({-1}), std::invalid_argument);
    if (W > 1) {
        EXPECT_THROW(make({(me + 1) % W}), std::invalid_argument);  // the calling rank not listed
    }
    auto comm = make();
    void* b = alloc(64);
    EXPECT_THROW(comm->all_reduce_sum_async(b, 8, DType::u8), std::invalid_argument);
    EXPECT_THROW(comm->reduce_scatter_sum_async(b, b, 2, DType::u8), std::invalid_argument);
    EXPECT_THROW(comm->broadcast_async(b, 8, DType::u8, W), std::invalid_argument);
    EXPECT_THROW(comm->broadcast_async(b, 8, DType::u8, -1), std::invalid_argument);
    EXPECT_THROW(comm->send_async(b, 8, DType::u8, -1), std::invalid_argument);
    EXPECT_THROW(comm->send_async(b, 4, DType::f32, W), std::invalid_argument);
    EXPECT_THROW(comm->recv_async(b, 4, DType::f32, W), std::invalid_argument);
    const CommStats& s = comm->stats();  // nothing counted for refused calls
    EXPECT_EQ(s.total_bytes(), 0u);
    EXPECT_EQ(std::accumulate(s.calls.begin(), s.calls.end(), uint64_t{0}), 0u);
    comm->barrier();
}

}  // namespace
}  // namespace llmtrain::commtest
