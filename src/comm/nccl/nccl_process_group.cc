// The NCCL backend (GPU tensors), built when CLEAVE_WITH_CUDA finds NCCL next to the toolkit.
//
// NOTE [NCCL groups]
// Rank 0 makes the unique id and publishes it in the group's store namespace ("nccl_unique_id");
// every rank then joins with ncclCommInitRank on the current CUDA device (the launcher or the
// program picks it, e.g. from the local rank). Operations are enqueued on the group's own stream
// and awaited by polling the stream and ncclCommGetAsyncError against the group's timeout; on a
// timeout or error the communicator is aborted (ncclCommAbort), which is what marks it unusable.
// Point-to-point messages between two ranks match in posting order (NCCL has no tags); the tag
// only appears in errors.
#ifdef CLEAVE_HAVE_NCCL

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <thread>

#include "cleave/comm/process_group.h"
#include "cleave/core/error.h"
#include "comm/backends.h"

namespace cleave::comm {
namespace {

using Clock = std::chrono::steady_clock;

void check_cuda(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess) {
    throw std::runtime_error(fmt::format("{}: {}", call, cudaGetErrorString(rc)));
  }
}

void check_nccl(ncclResult_t rc, const char* call, int peer = -1) {
  if (rc != ncclSuccess && rc != ncclInProgress) {
    throw BackendFailure(fmt::format("{}: {}", call, ncclGetErrorString(rc)), peer);
  }
}

constexpr LibraryNames<ncclDataType_t, ncclRedOp_t> kNcclNames{
    .float32 = ncclFloat32,
    .float64 = ncclFloat64,
    .int32 = ncclInt32,
    .int64 = ncclInt64,
    .boolean = ncclUint8,
    .sum = ncclSum,
    .prod = ncclProd,
    .max = ncclMax,
    .min = ncclMin,
};
ncclDataType_t nccl_type(DType dtype) { return kNcclNames.type(dtype); }
ncclRedOp_t nccl_op(ReduceOp op) { return kNcclNames.op(op); }

void check_gpu(const Tensor& t, const ProcessGroup& g) {
  CLEAVE_CHECK_ARG(t.device().type == DeviceType::kCUDA,
                   "group '{}' (nccl, rank {}): the tensor is on {}; the nccl backend needs CUDA "
                   "tensors (use backend \"gloo\" for CPU tensors)",
                   g.name(), g.rank(), t.device().to_string());
}

class NcclProcessGroup final : public ProcessGroup {
 public:
  explicit NcclProcessGroup(const ProcessGroupOptions& options) : ProcessGroup(options) {
    int devices = 0;
    const cudaError_t rc = cudaGetDeviceCount(&devices);
    CLEAVE_CHECK_ARG(rc == cudaSuccess && devices > 0,
                     "create_process_group('{}', nccl): no CUDA GPU is visible to this process "
                     "({}); the nccl backend needs one GPU per rank. Use backend \"gloo\" (CPU) "
                     "or \"mpi\" instead",
                     options.name, rc == cudaSuccess ? "0 devices" : cudaGetErrorString(rc));
    CLEAVE_CHECK_ARG(options.store != nullptr,
                     "create_process_group('{}', nccl): a rendezvous store is required (the "
                     "unique id is exchanged through it)",
                     options.name);
    auto store = make_prefix_store(options.name, options.store);
    ncclUniqueId id;
    if (options.rank == 0) {
      check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
      const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
      store->set("nccl_unique_id", std::vector<uint8_t>(bytes, bytes + sizeof(id)));
    } else {
      const std::vector<uint8_t> bytes = store->get("nccl_unique_id", options.timeout);
      CLEAVE_CHECK_ARG(bytes.size() == sizeof(id),
                       "create_process_group('{}', nccl): the unique id in the store has {} "
                       "bytes; expected {}",
                       options.name, bytes.size(), sizeof(id));
      std::memcpy(&id, bytes.data(), sizeof(id));
    }
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    const ncclResult_t init = ncclCommInitRank(&comm_, options.size, id, options.rank);
    if (init != ncclSuccess) {
      CLEAVE_UNAVAILABLE("create_process_group('{}', nccl): ncclCommInitRank: {}", options.name,
                         ncclGetErrorString(init));
    }
  }

  ~NcclProcessGroup() override {
    shutdown();
    if (comm_ != nullptr) broken() ? ncclCommAbort(comm_) : ncclCommDestroy(comm_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

 protected:
  // Waits for the work enqueued on the stream, or aborts the communicator after the timeout.
  void finish(const char* what) {
    const auto deadline = Clock::now() + options().timeout;
    while (true) {
      const cudaError_t rc = cudaStreamQuery(stream_);
      if (rc == cudaSuccess) return;
      if (rc != cudaErrorNotReady) check_cuda(rc, what);
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        check_nccl(async, what);
      }
      if (Clock::now() > deadline) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        throw std::runtime_error(
            fmt::format("{} timed out after {} ms", what, options().timeout.count()));
      }
      std::this_thread::yield();
    }
  }

  void do_all_reduce(const Tensor& t, ReduceOp op) override {
    check_gpu(t, *this);
    check_nccl(ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()),
                             nccl_type(t.dtype()), nccl_op(op), comm_, stream_),
               "ncclAllReduce");
    finish("ncclAllReduce");
  }

  // NOTE [AllReduce into other buffers]: NCCL reads one buffer and writes another natively, and
  // averages with ncclAvg (the CPU default would scale device memory from the host); several
  // buffers are one NCCL group of calls.
  void do_all_reduce_parts(const std::vector<Tensor>& outs, const std::vector<Tensor>& ins,
                           ReduceOp op) override {
    for (size_t k = 0; k < ins.size(); ++k) {
      check_gpu(ins[k], *this);
      check_gpu(outs[k], *this);
    }
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (size_t k = 0; k < ins.size(); ++k) {
      check_nccl(ncclAllReduce(ins[k].raw_data(), outs[k].raw_data(),
                               static_cast<size_t>(ins[k].numel()), nccl_type(ins[k].dtype()),
                               op == ReduceOp::kMean ? ncclAvg : nccl_op(op), comm_, stream_),
                 "ncclAllReduce");
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    finish("ncclAllReduce");
  }

  void do_all_gather(const Tensor& out, const Tensor& in) override {
    check_gpu(in, *this);
    check_gpu(out, *this);
    check_nccl(ncclAllGather(in.raw_data(), out.raw_data(), static_cast<size_t>(in.numel()),
                             nccl_type(in.dtype()), comm_, stream_),
               "ncclAllGather");
    finish("ncclAllGather");
  }

  void do_reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) override {
    check_gpu(in, *this);
    check_gpu(out, *this);
    check_nccl(ncclReduceScatter(in.raw_data(), out.raw_data(), static_cast<size_t>(out.numel()),
                                 nccl_type(in.dtype()), nccl_op(op), comm_, stream_),
               "ncclReduceScatter");
    finish("ncclReduceScatter");
  }

  void do_broadcast(const Tensor& t, int root) override {
    check_gpu(t, *this);
    check_nccl(ncclBroadcast(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()),
                             nccl_type(t.dtype()), root, comm_, stream_),
               "ncclBroadcast", root);
    finish("ncclBroadcast");
  }

  void do_all_to_all(const Tensor& out, const Tensor& in) override {
    check_gpu(in, *this);
    check_gpu(out, *this);
    const size_t chunk = static_cast<size_t>(in.numel() / size());
    const size_t bytes = chunk * dtype_size(in.dtype());
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (int peer = 0; peer < size(); ++peer) {
      ncclSend(static_cast<const char*>(in.raw_data()) + peer * bytes, chunk, nccl_type(in.dtype()),
               peer, comm_, stream_);
      ncclRecv(static_cast<char*>(out.raw_data()) + peer * bytes, chunk, nccl_type(in.dtype()),
               peer, comm_, stream_);
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd (AlltoAll)");
    finish("AlltoAll (ncclSend/ncclRecv)");
  }

  void do_exchange(const std::vector<PeerBuffer>& sends,
                   const std::vector<PeerBuffer>& recvs) override {
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (const PeerBuffer& s : sends) {
      check_gpu(s.tensor, *this);
      ncclSend(s.tensor.raw_data(), s.tensor.nbytes(), ncclUint8, s.peer, comm_, stream_);
    }
    for (const PeerBuffer& r : recvs) {
      check_gpu(r.tensor, *this);
      ncclRecv(r.tensor.raw_data(), r.tensor.nbytes(), ncclUint8, r.peer, comm_, stream_);
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd (point-to-point)");
    finish("point-to-point (ncclSend/ncclRecv)");
  }

  void do_barrier() override {
    if (barrier_buffer_ == nullptr) check_cuda(cudaMalloc(&barrier_buffer_, 4), "cudaMalloc");
    check_nccl(
        ncclAllReduce(barrier_buffer_, barrier_buffer_, 1, ncclInt32, ncclSum, comm_, stream_),
        "ncclAllReduce (barrier)");
    finish("barrier");
  }

 private:
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* barrier_buffer_ = nullptr;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_group(const ProcessGroupOptions& options) {
  return std::make_shared<NcclProcessGroup>(options);
}

}  // namespace cleave::comm

#endif  // CLEAVE_HAVE_NCCL
