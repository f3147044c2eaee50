// model/cuda/cuda_ops.cu — CudaOps (cuda_ops.hpp), its core: construction and teardown, memory,
// streams and events, casts, the backend's own device buffers (internal_malloc, the per-stream
// scratch), and make_cuda_backend, which picks the device and resolves model.attention. The op
// families are in cuda_ops_attention.cu, cuda_ops_encoder.cu, cuda_ops_layers.cu and
// cuda_ops_optim.cu.

#include <cstddef>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "model/cuda/cuda_backend.hpp"
#include "model/cuda/cuda_ops.hpp"
#include "model/cuda/kernels.cuh"
#ifdef LLMTRAIN_HAVE_CUDNN
#include "model/cuda/cudnn_attention.hpp"  // nvcc builds with cuDNN only (never under cuda_emu)
#endif

namespace llmtrain {
namespace {

constexpr size_t kLtWorkspaceBytes = 32u << 20;  // cuBLASLt's recommendation for Hopper

}  // namespace

namespace cuda {

CudaOps::CudaOps(DType act, const CudaBackendOptions& opt, AttentionChoice choice, int smem_optin)
    : act_(act), opt_(opt), attention_(std::move(choice)), smem_optin_(smem_optin) {
    const bool automatic = opt_.attention == Attention::automatic;
    opt_.attention = attention_.path;
    attention_automatic_ = automatic;
    if (cublasLtCreate(&lt_.handle) != CUBLAS_STATUS_SUCCESS) throw CudaError("cublasLtCreate failed");
    lt_.workspace = internal_malloc(kLtWorkspaceBytes);
    lt_.workspace_bytes = kLtWorkspaceBytes;
    lt_.autotune = opt_.matmul_autotune;
    int device = 0, major = 0, minor = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    cc_ = major * 10 + minor;
    for (BucketBuffer& b : buckets_) CUDA_CHECK(cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming));
    if (opt_.attention == Attention::cublas && cublasCreate(&blas_) != CUBLAS_STATUS_SUCCESS)
        throw CudaError("cublasCreate failed");
#ifdef LLMTRAIN_HAVE_CUDNN
    if (opt_.attention == Attention::cudnn) cudnn_ = std::make_unique<cuda::CudnnAttention>();
#endif
}

CudaOps::~CudaOps() {
    cudaDeviceSynchronize();
#ifdef LLMTRAIN_HAVE_CUDNN
    cudnn_.reset();
#endif
    for (auto& [s, buf] : scratch_) cudaFree(buf.ptr);
    for (auto& [s, buf] : gqa_) cudaFree(buf.ptr);
    for (auto& [s, buf] : fp8_) cudaFree(buf.ptr);
    for (auto& [key, buf] : rope_tables_) cudaFree(buf.ptr);
    for (BucketBuffer& b : buckets_) {
        cudaFree(b.dev);
        cudaFreeHost(b.host);
        cudaEventDestroy(b.done);
    }
    for (TokenSlot& c : token_slots_) {
        cudaFreeHost(c.host);
        cudaEventDestroy(c.ready);
    }
    if (blas_ != nullptr) cublasDestroy(blas_);
    if (rows_blas_ != nullptr) cublasDestroy(rows_blas_);
    cudaFree(lt_.workspace);
    cublasLtDestroy(lt_.handle);
    note_internal_memory(-static_cast<std::ptrdiff_t>(internal_bytes()));
}

// ---- memory ----
void* CudaOps::malloc(size_t bytes) {
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
    if (err != cudaSuccess) {
        cudaGetLastError();  // clear it: out of memory is reported by the exception
        throw std::runtime_error("cuda: cannot allocate " + std::to_string(bytes) + " bytes of device memory (" +
                                 cudaGetErrorString(err) + ")");
    }
    return p;
}

void CudaOps::free(void* p) { CUDA_CHECK(cudaFree(p)); }

void* CudaOps::malloc_host(size_t bytes) {
    void* p = nullptr;
    CUDA_CHECK(cudaMallocHost(&p, bytes == 0 ? 1 : bytes));
    return p;
}

void CudaOps::free_host(void* p) { CUDA_CHECK(cudaFreeHost(p)); }

void CudaOps::memcpy_h2d(void* dst, const void* src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
}

void CudaOps::memcpy_d2h(void* dst, const void* src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
}

void CudaOps::memcpy_d2d(void* dst, const void* src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaOps::memset(void* p, int value, size_t bytes) { CUDA_CHECK(cudaMemsetAsync(p, value, bytes, stream_)); }

void CudaOps::synchronize() { CUDA_CHECK(cudaDeviceSynchronize()); }

void CudaOps::mem_info(size_t* free_bytes, size_t* total_bytes) {
    CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
}

// ---- streams and events ----
Stream CudaOps::create_stream() {
    cudaStream_t s;  // non-blocking: ordered against the default stream only through events
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
}

void CudaOps::destroy_stream(Stream s) {
    for (auto* m : {&scratch_, &gqa_, &fp8_}) {
        auto it = m->find(static_cast<cudaStream_t>(s));
        if (it == m->end()) continue;
        CUDA_CHECK(cudaStreamSynchronize(it->first));
        internal_free(it->second.ptr, it->second.bytes);
        m->erase(it);
    }
    CUDA_CHECK(cudaStreamDestroy(static_cast<cudaStream_t>(s)));
}

Event CudaOps::create_event() {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
}

void CudaOps::destroy_event(Event e) { CUDA_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(e))); }

void CudaOps::record_event(Event e) { CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(e), stream_)); }

void CudaOps::wait_event(Event e) { CUDA_CHECK(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(e), 0)); }

void CudaOps::synchronize_event(Event e) { CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(e))); }

bool CudaOps::query_event(Event e) {
    const cudaError_t r = cudaEventQuery(static_cast<cudaEvent_t>(e));
    if (r == cudaErrorNotReady) return false;
    CUDA_CHECK(r);
    return true;
}

Event CudaOps::create_timed_event() {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreate(&e));
    return e;
}

double CudaOps::elapsed_seconds(Event start, Event end) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
    return ms / 1e3;
}

// ---- casts ----
void CudaOps::cast(void* dst, DType dst_t, const void* src, DType src_t, size_t n) {
    if (dst_t == src_t) return memcpy_d2d(dst, src, n * dtype_size(dst_t));
    if (dst_t == DType::bf16)
        cuda::cast(static_cast<bf16*>(dst), static_cast<const float*>(src), n, stream_);
    else
        cuda::cast(static_cast<float*>(dst), static_cast<const bf16*>(src), n, stream_);
}

// ---- the backend's own device memory ----
void* CudaOps::internal_malloc(size_t bytes) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    note_internal_memory(static_cast<std::ptrdiff_t>(bytes));
    return p;
}

void CudaOps::internal_free(void* p, size_t bytes) {
    if (p == nullptr) return;
    CUDA_CHECK(cudaFree(p));
    note_internal_memory(-static_cast<std::ptrdiff_t>(bytes));
}

void* CudaOps::grow(Buffer& buf, size_t bytes) {
    if (buf.bytes < bytes) {
        if (buf.ptr != nullptr) CUDA_CHECK(cudaStreamSynchronize(stream_));
        internal_free(buf.ptr, buf.bytes);
        buf.ptr = internal_malloc(bytes);
        buf.bytes = bytes;
    }
    return buf.ptr;
}

}  // namespace cuda

int cuda_device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

std::unique_ptr<Ops> make_cuda_backend(const std::string& precision, const CudaBackendOptions& options) {
    DType act;
    if (precision == "bf16")
        act = DType::bf16;
    else if (precision == "fp32")
        act = DType::f32;
    else
        throw std::invalid_argument("training.precision: expected \"bf16\" or \"fp32\", got \"" + precision + "\"");
    if (options.attention_workspace_mb < 1)
        throw std::invalid_argument("model.attention_workspace_mb: expected an integer >= 1, got " +
                                    std::to_string(options.attention_workspace_mb));
    if (options.attention == Attention::cudnn) {
#ifndef LLMTRAIN_HAVE_CUDNN
        throw std::invalid_argument(
            "model.attention = \"cudnn\": this build has no cuDNN (use \"auto\" or \"cublas\")");
#endif
        if (act != DType::bf16)
            throw std::invalid_argument("model.attention = \"cudnn\" needs training.precision = \"bf16\"");
    }
    const int n = cuda_device_count();
    if (n == 0) throw std::runtime_error("run.backend = \"cuda\": no CUDA device is present");
    if (options.local_rank < 0)
        throw std::invalid_argument("CudaBackendOptions::local_rank: expected >= 0, got " +
                                    std::to_string(options.local_rank));
    const int device = options.local_rank % n;
    CUDA_CHECK(cudaSetDevice(device));
    AttentionEnv env;
    env.bf16 = act == DType::bf16;
    env.head_size = options.head_size;
    CUDA_CHECK(cudaDeviceGetAttribute(&env.cc_major, cudaDevAttrComputeCapabilityMajor, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&env.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (const std::string e = attention_fit_error(options.attention, env); !e.empty()) throw std::invalid_argument(e);
#ifdef LLMTRAIN_HAVE_CUDNN  // cudnn_version stays 0 otherwise: "this build has no cuDNN"
    env.cudnn_version = cuda::CudnnAttention::version();
#endif
    return std::make_unique<cuda::CudaOps>(act, options, resolve_attention(options.attention, env), env.smem_optin);
}

}  // namespace llmtrain
