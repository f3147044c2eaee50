// model/cuda/cudnn_attention.cu — CudnnAttention: causal attention as cuDNN operation graphs.
//
// cuDNN's fused flash-attention engine is selected by the shape of an operation graph built with
// the backend API (cudnn_graph.h). The graphs below are the pattern the engine accepts for cuDNN
// 9.x (the composite softmax; cuDNN 9.21 adds a single softmax operation):
// forward   S = Q K^T * scale, causal mask (generated row/column indices, row >= col, else the
//           lowest float), softmax with stats (max, x - max, exp, sum, lse = max + log sum -> our
//           lse output, exp / sum -> P in bf16), O = P V;
// backward  D = rowsum(dO * O) * 1 (the dropout-scale slot) into a non-virtual fp32 (b,h,t,1)
//           tensor in the workspace; the same scaled S, minus lse, then the mask; P = exp(that) in
//           fp32 (bf16 only where it feeds dV = P^T dO); dS = P (dO V^T - D) * scale in fp32;
//           dK = dS^T Q with dS^T in bf16; dQ = dS K written straight to dQ in bf16.
// The data types, virtual/non-virtual choices and the order of these operations follow the graph
// cudnn-frontend 1.x emits for cuDNN 9.x (its composite SDPA backward node); the engine matches
// the graph's shape, so a different spelling of the same math can find no engine.
//
// Determinism (docs/attention.md "Determinism"). A flash-attention backward parallel over
// key blocks sums each dQ row from several blocks; summed with fp32 atomics into a dQ accumulator,
// the order, and so the bits, change from run to run (dK and dV are owned by one block each). In the
// backend API the graph itself selects the algorithm: a non-virtual fp32 dQ accumulator after the
// dS K matmul (then an identity to bf16) selects the atomic one; dS K written directly to dQ
// selects the "dP workspace" one, which keeps dP for all (b, h, T, T) in the workspace (about
// b*h*T*T*2 bytes, T rounded up to 64) and computes dQ in its own pass, in a fixed order.
// cudnn-frontend's SDPA_backward_attributes::set_deterministic_algorithm(true) does exactly this
// choice of graph on sm_8x/sm_9x (scaled_dot_product_flash_attention.h: "use_dp_workspace"; on
// sm_10x it also pins engine knobs, which this file does not do, so there it refuses the backward).
// llm.c asks for it since its PR #652, after finding the default backward non-deterministic at large
// batch sizes. As a second guard, engine configurations that declare CUDNN_NUMERICAL_NOTE_
// NONDETERMINISTIC are never used for the backward.
// Q, K, V are strided views into qkv (B,T,W), W = (NH + 2 NKV)*HS (3C when NKV = NH): Q dims
// (b, NH, t, d), K and V (b, NKV, t, d), all with strides (WT, HS, W, 1); K^T and V^T swap the last
// two. Plans are cached per (direction, B, T, C, NH, NKV).
//
// Grouped-query attention (NKV < NH; docs/cuda.md "Llama kernels"). The graph is the one cudnn-
// frontend's composite SDPA nodes emit when K/V have h_k < h_q heads (scaled_dot_product_flash_
// attention.h): the matmuls Q K^T, P V, dO V^T and dS K take K/V with NKV heads and broadcast them
// over the batch dimension, query head h meeting key/value head h / (NH/NKV) ("b (hk g) ..."); in the
// backward dV = P^T dO and dK = dS^T Q become virtual full-head tensors (b, NH, T, HS) in bf16 (the
// frontend's dV_fullhead / dK_fullhead), each followed by a reduction ADD into dV / dK (b, NKV, T,
// HS) — the engine's extra dK/dV reduction kernel (cuDNN 8.9.7's release notes: GQA for fused flash
// attention on Ampere and Hopper). dQ and the deterministic dP-workspace choice are unchanged (the
// frontend picks use_dp_workspace independently of the head counts); the engine-configuration guard
// against CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC applies as well. How the engine orders the group's sum
// is not documented: test_cuda_gpu checks the backward bit for bit (CudnnGqa*). With NKV = NH the
// graph is exactly the multi-head one (W = 3C, no reductions). Where cuDNN refuses the grouped-query
// graph, cuda_ops.cu falls back to the multi-head graph on gqa.cu's expanded copy.
#include "model/cuda/cudnn_attention.hpp"

#include <cudnn.h>

#include <cmath>
#include <limits>
#include <string>

#include "model/cuda/launch.cuh"

namespace llmtrain::cuda {
namespace {

using Desc = cudnnBackendDescriptor_t;

/// Throws CudaError naming the step when a cuDNN call fails.
void check(cudnnStatus_t st, const char* what) {
    if (st != CUDNN_STATUS_SUCCESS)
        throw CudaError(std::string("cuDNN attention: ") + what + " failed: " + cudnnGetErrorString(st));
}

// Unique ids of the tensors the variant pack binds to memory (virtual tensors get ids from 100).
enum Uid : int64_t { kQ = 1, kKT, kV, kO, kStats, kScale, kNegInf, kDO, kDQ, kDK, kDV, kOne, kVT, kSoftmaxSum };

/// cuDNN's own account of its last failure (empty when it has none).
std::string last_cudnn_error() {
    char msg[1024] = {0};
    cudnnGetLastErrorString(msg, sizeof msg);
    return msg;
}

/// Builds one operation graph: creates descriptors (kept for the plan's lifetime) and operations.
class GraphBuilder {
public:
    explicit GraphBuilder(std::vector<void*>& keep) : keep_(keep) {}

    Desc make(cudnnBackendDescriptorType_t type) {
        Desc d;
        check(cudnnBackendCreateDescriptor(type, &d), "cudnnBackendCreateDescriptor");
        keep_.push_back(d);
        return d;
    }
    static void set(Desc d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                    const void* value) {
        check(cudnnBackendSetAttribute(d, name, type, count, value), "cudnnBackendSetAttribute");
    }

    /// A 4-D tensor. uid < 0 makes a virtual tensor with a fresh id.
    Desc tensor(int64_t uid, cudnnDataType_t type, const int64_t (&dims)[4], const int64_t (&strides)[4],
                bool by_value = false) {
        const bool is_virtual = uid < 0;
        if (is_virtual) uid = next_virtual_++;
        const int64_t alignment = 16;
        Desc t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
        set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
        set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
        set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
        set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
        set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
        set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
        set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
        check(cudnnBackendFinalize(t), "tensor descriptor");
        return t;
    }
    /// A virtual tensor with packed (row-major) strides.
    Desc virt(cudnnDataType_t type, const int64_t (&dims)[4]) {
        const int64_t strides[4] = {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
        return tensor(-1, type, dims, strides);
    }
    /// A by-value fp32 scalar (1,1,1,1) bound at execution.
    Desc scalar(int64_t uid) {
        const int64_t one[4] = {1, 1, 1, 1};
        return tensor(uid, CUDNN_DATA_FLOAT, one, one, true);
    }

    /// y = mode(x [, b [, t]]) with math precision `math` (GEN_INDEX: along `axis`).
    void pointwise(cudnnPointwiseMode_t mode, Desc x, Desc b, Desc y, Desc t = nullptr,
                   cudnnDataType_t math = CUDNN_DATA_FLOAT, int64_t axis = -1) {
        Desc pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
        set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
        set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math);
        if (axis >= 0) set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
        check(cudnnBackendFinalize(pw), "pointwise descriptor");
        Desc op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
        set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
        set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
        if (b != nullptr) set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
        set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
        if (t != nullptr) set(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
        check(cudnnBackendFinalize(op), "pointwise operation");
        ops_.push_back(op);
    }
    /// c = a @ b (batched over the first two dims), fp32 accumulation.
    void matmul(Desc a, Desc b, Desc c) {
        Desc mm = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
        const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
        set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
        check(cudnnBackendFinalize(mm), "matmul descriptor");
        Desc op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
        set(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
        set(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
        set(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
        set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
        check(cudnnBackendFinalize(op), "matmul operation");
        ops_.push_back(op);
    }
    /// y = reduce(x) over the dims where y has extent 1 (or, for the key/value heads, groups of x's
    /// heads: y's extent divides x's), fp32.
    void reduce(cudnnReduceTensorOp_t how, Desc x, Desc y) {
        Desc r = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
        const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
        set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how);
        set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
        check(cudnnBackendFinalize(r), "reduction descriptor");
        Desc op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
        set(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
        set(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
        set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r);
        check(cudnnBackendFinalize(op), "reduction operation");
        ops_.push_back(op);
    }
    /// y = x viewed with y's dims and strides (a transpose here).
    void reshape(Desc x, Desc y) {
        Desc op = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
        set(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
        set(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
        check(cudnnBackendFinalize(op), "reshape operation");
        ops_.push_back(op);
    }

    /// The causal mask on scores s (b,h,T,T) fp32: keeps s where row >= column, else the lowest float.
    Desc causal_mask(Desc s, const int64_t (&dims)[4], Desc neg_inf) {
        Desc row = virt(CUDNN_DATA_INT32, dims), col = virt(CUDNN_DATA_INT32, dims);
        pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, row, nullptr, CUDNN_DATA_INT32, 2);
        pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, col, nullptr, CUDNN_DATA_INT32, 3);
        Desc keep = virt(CUDNN_DATA_BOOLEAN, dims);
        pointwise(CUDNN_POINTWISE_CMP_GE, row, col, keep, nullptr, CUDNN_DATA_BOOLEAN);
        Desc masked = virt(CUDNN_DATA_FLOAT, dims);
        pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, neg_inf, masked, keep);
        return masked;
    }

    /// Finalizes the graph and returns the plan of the first engine configuration that builds one;
    /// with `deterministic`, configurations whose engine declares itself non-deterministic are skipped.
    void* build_plan(cudnnHandle_t handle, bool deterministic, int64_t* workspace) {
        Desc graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
        set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
        set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops_.size()),
            ops_.data());
        const cudnnStatus_t st = cudnnBackendFinalize(graph);
        if (st != CUDNN_STATUS_SUCCESS)
            throw CudaError(std::string("cuDNN attention: the operation graph was not accepted: ") +
                            cudnnGetErrorString(st) + " " + last_cudnn_error() + diagnose_hint());
        Desc heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_INSTANT;
        set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
        set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
        check(cudnnBackendFinalize(heur), "engine heuristics");
        int64_t count = 0;
        check(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                       nullptr),
              "engine heuristics count");
        std::vector<Desc> configs;
        for (int64_t i = 0; i < count; i++) configs.push_back(make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
        int64_t got = 0;
        std::string failures;
        if (count > 0)
            check(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                           &got, configs.data()),
                  "engine heuristics results");
        for (int64_t i = 0; i < got; i++) {
            if (deterministic && declares_nondeterministic(configs[i])) {
                failures += " [engine declares CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC]";
                continue;
            }
            Desc plan = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
            set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
            set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &configs[i]);
            const cudnnStatus_t fin = cudnnBackendFinalize(plan);
            if (fin != CUDNN_STATUS_SUCCESS) {  // try the next engine, remembering why this one failed
                failures += std::string(" [") + cudnnGetErrorString(fin) + " " + last_cudnn_error() + "]";
                continue;
            }
            int64_t n = 0;
            check(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                           workspace),
                  "plan workspace size");
            return plan;
        }
        throw CudaError("cuDNN attention: no engine supports this graph (" + std::to_string(got) +
                        " engine configurations tried" + (failures.empty() ? "" : ":" + failures) + ")" +
                        diagnose_hint());
    }

    /// Whether the engine of configuration `cfg` lists CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC.
    bool declares_nondeterministic(Desc cfg) {
        Desc engine = make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
        int64_t n = 0;
        check(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine),
              "engine of a configuration");
        cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
        check(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                       CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes),
              "engine numerical notes");
        for (int64_t i = 0; i < n; i++)
            if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return true;
        return false;
    }

    /// What to do next, appended to every graph failure: cuDNN logs the rule a graph broke.
    static std::string diagnose_hint() {
        return "; cuDNN " + std::to_string(cudnnGetVersion()) +
               "; rerun with CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr for the backend's reason, or use "
               "model.attention = \"cublas\"";
    }

private:
    std::vector<void*>& keep_;
    std::vector<Desc> ops_;
    int64_t next_virtual_ = 100;
};

/// Runs `plan` with the (uid, pointer) bindings and `workspace` on the handle's stream.
void execute(cudnnHandle_t handle, void* plan, const std::vector<int64_t>& uids, const std::vector<void*>& ptrs,
             void* workspace) {
    Desc pack;
    check(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack), "variant pack");
    GraphBuilder::set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()),
                      uids.data());
    GraphBuilder::set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                      static_cast<int64_t>(ptrs.size()), ptrs.data());
    GraphBuilder::set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
    const cudnnStatus_t st = cudnnBackendFinalize(pack);
    const cudnnStatus_t run = st == CUDNN_STATUS_SUCCESS
                                  ? cudnnBackendExecute(handle, static_cast<Desc>(plan), pack)
                                  : st;
    cudnnBackendDestroyDescriptor(pack);
    check(run, "execute");
}

}  // namespace

CudnnAttention::CudnnAttention() {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&cc_major_, cudaDevAttrComputeCapabilityMajor, device));
    cudnnHandle_t h;
    check(cudnnCreate(&h), "cudnnCreate");
    handle_ = h;
}

int CudnnAttention::version() { return static_cast<int>(cudnnGetVersion()); }

/// Destroys descriptors in the reverse order of their creation (a plan before what it was built from).
static void destroy_descriptors(std::vector<void*>& keep) {
    for (auto it = keep.rbegin(); it != keep.rend(); ++it) cudnnBackendDestroyDescriptor(static_cast<Desc>(*it));
    keep.clear();
}

CudnnAttention::~CudnnAttention() {
    for (auto& [key, plan] : plans_) destroy_descriptors(plan.keep);
    cudnnDestroy(static_cast<cudnnHandle_t>(handle_));
}

CudnnAttention::Plan& CudnnAttention::plan_for(bool backward, int B, int T, int C, int NH, int NKV) {
    const auto key = std::make_tuple(backward, B, T, C, NH, NKV);
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
    if (backward && cc_major_ == 10)
        throw CudaError("cuDNN attention: no deterministic backward on this sm_10x device (cudnn-frontend pins "
                        "engine knobs for it there, this backend does not); use model.attention = \"cublas\"");
    Plan plan;
    struct Cleanup {  // a graph that fails to build leaves no descriptors behind
        std::vector<void*>* keep;
        ~Cleanup() {
            if (keep != nullptr) destroy_descriptors(*keep);
        }
    } cleanup{&plan.keep};
    GraphBuilder g(plan.keep);
    if (NKV < 1 || NH % NKV != 0)
        throw CudaError("cuDNN attention: n_kv_head " + std::to_string(NKV) + " must divide n_head " +
                        std::to_string(NH));
    const int64_t b = B, h = NH, hk = NKV, t = T, c = C, d = C / NH, w = (h + 2 * hk) * d;  // w: a row of qkv
    const int64_t qkv_dims[4] = {b, h, t, d}, qkv_strides[4] = {w * t, d, w, 1};
    const int64_t kv_dims[4] = {b, hk, t, d};                                        // K, V: NKV heads
    const int64_t tr_dims[4] = {b, hk, d, t}, tr_strides[4] = {w * t, d, 1, w};  // K^T, V^T views
    const int64_t out_dims[4] = {b, h, t, d}, out_strides[4] = {c * t, d, c, 1};
    const int64_t s_dims[4] = {b, h, t, t}, row_dims[4] = {b, h, t, 1};
    const int64_t row_strides[4] = {h * t, t, 1, 1};
    const int64_t s_tr_strides[4] = {h * t * t, t * t, 1, t};  // (b,h,T,T) transposed in place
    Desc q = g.tensor(kQ, CUDNN_DATA_BFLOAT16, qkv_dims, qkv_strides);
    Desc kt = g.tensor(kKT, CUDNN_DATA_BFLOAT16, tr_dims, tr_strides);
    Desc o = g.tensor(kO, CUDNN_DATA_BFLOAT16, out_dims, out_strides);
    Desc stats = g.tensor(kStats, CUDNN_DATA_FLOAT, row_dims, row_strides);
    Desc scale = g.scalar(kScale), neg_inf = g.scalar(kNegInf);

    Desc s = g.virt(CUDNN_DATA_FLOAT, s_dims), ss = g.virt(CUDNN_DATA_FLOAT, s_dims);
    g.matmul(q, kt, s);
    g.pointwise(CUDNN_POINTWISE_MUL, s, scale, ss);
    if (!backward) {
        Desc sm = g.causal_mask(ss, s_dims, neg_inf);
        Desc v = g.tensor(kV, CUDNN_DATA_BFLOAT16, kv_dims, qkv_strides);
        Desc mx = g.virt(CUDNN_DATA_FLOAT, row_dims), sub = g.virt(CUDNN_DATA_FLOAT, s_dims);
        Desc e = g.virt(CUDNN_DATA_FLOAT, s_dims), z = g.virt(CUDNN_DATA_FLOAT, row_dims);
        Desc lz = g.virt(CUDNN_DATA_FLOAT, row_dims), p = g.virt(CUDNN_DATA_BFLOAT16, s_dims);
        g.reduce(CUDNN_REDUCE_TENSOR_MAX, sm, mx);
        g.pointwise(CUDNN_POINTWISE_SUB, sm, mx, sub);
        g.pointwise(CUDNN_POINTWISE_EXP, sub, nullptr, e);
        g.reduce(CUDNN_REDUCE_TENSOR_ADD, e, z);
        g.pointwise(CUDNN_POINTWISE_LOG, z, nullptr, lz);
        g.pointwise(CUDNN_POINTWISE_ADD, mx, lz, stats);
        g.pointwise(CUDNN_POINTWISE_DIV, e, z, p);
        g.matmul(p, v, o);
    } else {
        Desc vt = g.tensor(kVT, CUDNN_DATA_BFLOAT16, tr_dims, tr_strides);
        Desc dout = g.tensor(kDO, CUDNN_DATA_BFLOAT16, out_dims, out_strides);
        Desc dq = g.tensor(kDQ, CUDNN_DATA_BFLOAT16, qkv_dims, qkv_strides);
        Desc dk = g.tensor(kDK, CUDNN_DATA_BFLOAT16, kv_dims, qkv_strides);
        Desc dv = g.tensor(kDV, CUDNN_DATA_BFLOAT16, kv_dims, qkv_strides);
        // grouped-query: per-query-head dK / dV (virtual, bf16, packed), then summed over each group
        const int64_t full_dims[4] = {b, h, t, d};
        const auto per_head_then_sum = [&](Desc a, Desc bm, Desc y) {
            if (hk == h) return g.matmul(a, bm, y);
            Desc full = g.virt(CUDNN_DATA_BFLOAT16, full_dims);
            g.matmul(a, bm, full);
            g.reduce(CUDNN_REDUCE_TENSOR_ADD, full, y);
        };
        Desc one = g.scalar(kOne);
        // D = rowsum(dO * O) * 1, a non-virtual fp32 tensor in the workspace (the engine's "softmax sum")
        Desc dodo = g.virt(CUDNN_DATA_FLOAT, out_dims), dsum = g.virt(CUDNN_DATA_FLOAT, row_dims);
        Desc delta = g.tensor(kSoftmaxSum, CUDNN_DATA_FLOAT, row_dims, row_strides);
        g.pointwise(CUDNN_POINTWISE_MUL, dout, o, dodo);
        g.reduce(CUDNN_REDUCE_TENSOR_ADD, dodo, dsum);
        g.pointwise(CUDNN_POINTWISE_MUL, dsum, one, delta);
        // P = exp(mask(S - lse)) in fp32; dV = P^T dO with P^T in bf16
        Desc sub = g.virt(CUDNN_DATA_FLOAT, s_dims), p = g.virt(CUDNN_DATA_FLOAT, s_dims);
        g.pointwise(CUDNN_POINTWISE_SUB, ss, stats, sub);
        Desc subm = g.causal_mask(sub, s_dims, neg_inf);
        g.pointwise(CUDNN_POINTWISE_EXP, subm, nullptr, p);
        Desc pt = g.tensor(-1, CUDNN_DATA_BFLOAT16, s_dims, s_tr_strides);
        g.reshape(p, pt);
        per_head_then_sum(pt, dout, dv);
        // dS = P * (dO V^T - D) * scale, fp32
        Desc dp = g.virt(CUDNN_DATA_FLOAT, s_dims), dpd = g.virt(CUDNN_DATA_FLOAT, s_dims);
        Desc dpp = g.virt(CUDNN_DATA_FLOAT, s_dims), ds = g.virt(CUDNN_DATA_FLOAT, s_dims);
        g.matmul(dout, vt, dp);
        g.pointwise(CUDNN_POINTWISE_SUB, dp, delta, dpd);
        g.pointwise(CUDNN_POINTWISE_MUL, dpd, p, dpp);
        g.pointwise(CUDNN_POINTWISE_MUL, dpp, scale, ds);
        // dK = dS^T Q, with dS^T in bf16 (the reshape is also the cast)
        Desc dst = g.tensor(-1, CUDNN_DATA_BFLOAT16, s_dims, s_tr_strides);
        g.reshape(ds, dst);
        per_head_then_sum(dst, q, dk);
        // dQ = dS K (K as a virtual fp32 view) straight into dQ: no fp32 accumulator, so the engine
        // takes its deterministic dP-workspace algorithm (the file's header)
        Desc k = g.tensor(-1, CUDNN_DATA_FLOAT, kv_dims, qkv_strides);
        g.reshape(kt, k);
        g.matmul(ds, k, dq);
    }
    plan.plan = g.build_plan(static_cast<cudnnHandle_t>(handle_), backward, &plan.workspace);
    Plan& kept = plans_.emplace(key, std::move(plan)).first->second;
    cleanup.keep = nullptr;  // the descriptors now belong to plans_
    return kept;
}

namespace {
size_t round_up_256(size_t bytes) { return (bytes + 255) / 256 * 256; }

/// Backward's workspace: the plan's own bytes (the dP of the deterministic algorithm among them),
/// then the fp32 softmax sum D (B,NH,T), 256-byte aligned.
struct BackwardWorkspace {
    size_t sum_offset, total;
    BackwardWorkspace(int64_t plan_bytes, int B, int T, int NH)
        : sum_offset(round_up_256(static_cast<size_t>(plan_bytes))),
          total(sum_offset + sizeof(float) * static_cast<size_t>(B) * NH * T) {}
};
}  // namespace

size_t CudnnAttention::workspace_bytes(bool backward, int B, int T, int C, int NH, int NKV) {
    const Plan& plan = plan_for(backward, B, T, C, NH, NKV);
    if (!backward) return round_up_256(static_cast<size_t>(plan.workspace));
    return BackwardWorkspace(plan.workspace, B, T, NH).total;
}

void CudnnAttention::forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T, int C, int NH,
                             int NKV, void* workspace, cudaStream_t stream) {
    Plan& plan = plan_for(false, B, T, C, NH, NKV);
    const size_t kv = static_cast<size_t>(C / NH) * NKV;  // K starts at C, V at C + kv
    check(cudnnSetStream(static_cast<cudnnHandle_t>(handle_), stream), "cudnnSetStream");
    float scale = 1.0f / std::sqrt(static_cast<float>(C / NH)), neg_inf = std::numeric_limits<float>::lowest();
    auto* base = const_cast<__nv_bfloat16*>(qkv);
    const std::vector<int64_t> uids = {kQ, kKT, kV, kO, kStats, kScale, kNegInf};
    const std::vector<void*> ptrs = {base, base + C, base + C + kv, out, lse, &scale, &neg_inf};
    execute(static_cast<cudnnHandle_t>(handle_), plan.plan, uids, ptrs, workspace);
}

void CudnnAttention::backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                              const __nv_bfloat16* out, const float* lse, int B, int T, int C, int NH, int NKV,
                              void* workspace, cudaStream_t stream) {
    Plan& plan = plan_for(true, B, T, C, NH, NKV);
    const size_t kv = static_cast<size_t>(C / NH) * NKV;  // K starts at C, V at C + kv
    check(cudnnSetStream(static_cast<cudnnHandle_t>(handle_), stream), "cudnnSetStream");
    const BackwardWorkspace layout(plan.workspace, B, T, NH);
    char* ws = static_cast<char*>(workspace);
    float scale = 1.0f / std::sqrt(static_cast<float>(C / NH)), neg_inf = std::numeric_limits<float>::lowest();
    float one = 1.0f;
    auto* base = const_cast<__nv_bfloat16*>(qkv);
    const std::vector<int64_t> uids = {kQ,  kKT, kVT, kO,  kStats, kScale,     kNegInf,
                                       kDO, kDQ, kDK, kDV, kOne,   kSoftmaxSum};
    const std::vector<void*> ptrs = {base,
                                     base + C,
                                     base + C + kv,
                                     const_cast<__nv_bfloat16*>(out),
                                     const_cast<float*>(lse),
                                     &scale,
                                     &neg_inf,
                                     const_cast<__nv_bfloat16*>(dout),
                                     dqkv,
                                     dqkv + C,
                                     dqkv + C + kv,
                                     &one,
                                     ws + layout.sum_offset};
    execute(static_cast<cudnnHandle_t>(handle_), plan.plan, uids, ptrs, ws);
}

}  // namespace llmtrain::cuda
