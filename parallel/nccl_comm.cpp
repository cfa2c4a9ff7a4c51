// NcclComm: the host-side call check, then one NCCL call on the device buffers, then a bounded
// wait for it to finish that watches for a failed peer.
#include "parallel/nccl_comm.h"

#include <mutex>
#include <string>
#include <thread>

#include "autograd/context.h"
#include "autograd/cuda/cuda_backend.h"
#include "parallel/thread_comm.h"

namespace shardscope {

void nccl_check(ncclResult_t code, const char* what, const char* file, int line) {
  if (code == ncclSuccess) return;
  std::string message = std::string(file) + ":" + std::to_string(line) + ": " + what +
                        " failed: " + ncclGetErrorString(code);
  const char* detail = ncclGetLastError(nullptr);
  if (detail != nullptr && detail[0] != '\0') message += " (" + std::string(detail) + ")";
  throw CommError(message);
}

void nccl_cuda_check(cudaError_t code, const char* what, const char* file, int line) {
  if (code == cudaSuccess) return;
  throw CommError(std::string(file) + ":" + std::to_string(line) + ": " + what +
                  " failed: " + cudaGetErrorName(code) + ": " + cudaGetErrorString(code));
}

namespace {

// The first failure of a run, shared by every NcclComm of a threads run (and the groups split
// from it), so a rank waiting for a collective on its device can see that a peer failed and stop
// waiting: NCCL kernels wait for their peers without any time limit.
class NcclFailure {
 public:
  void set(const std::string& message) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (message_.empty()) message_ = message;
  }
  std::string message() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return message_;
  }

 private:
  mutable std::mutex mutex_;
  std::string message_;
};

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::u8:
      return ncclUint8;
  }
  throw ArgumentError("no NCCL datatype for this dtype");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  return op == ReduceOp::sum ? ncclSum : ncclMax;
}

// Device memory for the copy an in-place all-to-all needs; freed on every path.
class DeviceScratch {
 public:
  explicit DeviceScratch(std::size_t bytes) {
    SHARDSCOPE_NCCL_CUDA_CHECK(cudaMalloc(&data_, bytes));
  }
  ~DeviceScratch() { cudaFree(data_); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  unsigned char* data() const { return static_cast<unsigned char*>(data_); }

 private:
  void* data_ = nullptr;
};

class NcclComm;
std::unique_ptr<NcclComm> join_nccl_group(std::unique_ptr<Communicator> host, int device,
                                          const NcclOptions& options,
                                          std::shared_ptr<NcclFailure> failure);

class NcclComm final : public Communicator {
 public:
  NcclComm(ncclComm_t comm, int device, std::unique_ptr<Communicator> host,
           std::shared_ptr<NcclFailure> failure, const NcclOptions& options)
      : comm_(comm),
        device_(device),
        host_(std::move(host)),
        failure_(std::move(failure)),
        options_(options) {}
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const char* backend_name() const override { return "nccl"; }
  void run(const CollectiveCall& call, const void* send, void* recv) override;
  std::unique_ptr<Communicator> split(int color, int key) override;
  void abort(const std::string& reason) override;
  void attach(Context& ctx) override;

 private:
  void check_calls(const CollectiveCall& call);
  void launch(const CollectiveCall& call, const void* send, void* recv);
  void launch_all_to_all(const CollectiveCall& call, const unsigned char* send,
                         unsigned char* recv);
  void wait_until_done(const CollectiveCall& call);
  [[noreturn]] void fail_on_device(const std::string& message);
  void throw_if_unusable() const;
  void order_after_compute();

  ncclComm_t comm_;
  int device_;
  std::unique_ptr<Communicator> host_;  // the same ranks on host memory: checks, barrier, split
  std::shared_ptr<NcclFailure> failure_;
  NcclOptions options_;
  // The collectives run on a stream of their own. Before each one, an event recorded on the
  // compute stream (the attached context's CUDA backend) makes this stream wait for the kernels
  // that wrote the send buffer; run() returns once the collective finished, so the kernels after
  // it are ordered too (the engine is synchronous). Without an attached context (a communicator
  // used on its own), run() waits for the whole device instead. Made on first use, on the rank's
  // thread, so that they belong to the rank's device.
  cudaStream_t compute_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
};

NcclComm::~NcclComm() {
  cudaSetDevice(device_);
  if (ready_ != nullptr) cudaEventDestroy(ready_);
  if (comm_ == nullptr) {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    return;
  }
  // After a failure a peer may never join an operation still queued: abort instead of waiting.
  if (failure_->message().empty()) {
    ncclCommDestroy(comm_);
  } else {
    ncclCommAbort(comm_);
  }
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void NcclComm::attach(Context& ctx) {
  if (ctx.device().kind != DeviceKind::cuda) {
    throw ArgumentError("rank " + std::to_string(rank()) +
                        ": the NCCL communicator needs a context on a CUDA device, given " +
                        ctx.device().str());
  }
  compute_ = static_cast<cudaStream_t>(cuda_backend_stream(ctx.backend()));
}

void NcclComm::order_after_compute() {
  if (stream_ == nullptr) {
    SHARDSCOPE_NCCL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    SHARDSCOPE_NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  }
  if (compute_ == nullptr) {
    SHARDSCOPE_NCCL_CUDA_CHECK(cudaDeviceSynchronize());
    return;
  }
  SHARDSCOPE_NCCL_CUDA_CHECK(cudaEventRecord(ready_, compute_));
  SHARDSCOPE_NCCL_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
}

void NcclComm::throw_if_unusable() const {
  const std::string failure = failure_->message();
  if (!failure.empty()) throw CommError(failure);
  if (comm_ == nullptr) throw CommError("the NCCL communicator was aborted by an earlier failure");
}

void NcclComm::run(const CollectiveCall& call, const void* send, void* recv) {
  throw_if_unusable();
  // The check comes first: every rank then validates the same call, so a malformed call fails on
  // every rank alike instead of leaving the others waiting inside NCCL.
  if (options_.check_calls) check_calls(call);
  validate_call(call, size(), rank());
  if (call.kind == CollectiveKind::barrier) {
    // The check's exchange already waited for every rank; without it, a host barrier does.
    if (!options_.check_calls) host_->run(call, nullptr, nullptr);
    return;
  }
  if (call.count == 0) return;
  SHARDSCOPE_NCCL_CUDA_CHECK(cudaSetDevice(device_));
  order_after_compute();  // the backend's work on the buffers comes first
  launch(call, send, recv);
  wait_until_done(call);
}

// One all-gather of fixed-size call descriptors over the host communicator per collective: the
// price of a mismatch being an error on every rank instead of a hang on the device.
void NcclComm::check_calls(const CollectiveCall& call) {
  check_same_call(call, size(), [this](const void* mine, void* all, std::size_t bytes) {
    CollectiveCall exchange;
    exchange.kind = CollectiveKind::all_gather;
    exchange.dtype = DType::u8;
    exchange.count = static_cast<std::int64_t>(bytes);
    exchange.site.op = "the NCCL call check";
    host_->run(exchange, mine, all);
  });
}

void NcclComm::launch(const CollectiveCall& call, const void* send, void* recv) {
  const ncclDataType_t type = nccl_type(call.dtype);
  const std::size_t element = dtype_size(call.dtype);
  const auto count = static_cast<std::size_t>(call.count);
  const std::size_t chunk = count / static_cast<std::size_t>(size());  // checked to divide
  const auto me = static_cast<std::size_t>(rank());
  const auto* in = static_cast<const unsigned char*>(send);
  auto* out = static_cast<unsigned char*>(recv);
  const bool in_place = in == out;
  switch (call.kind) {
    case CollectiveKind::all_reduce:
      SHARDSCOPE_NCCL_CHECK(
          ncclAllReduce(in, out, count, type, nccl_op(call.reduce), comm_, stream_));
      return;
    case CollectiveKind::all_gather:
      // In place, this rank's values start recv; NCCL wants them at the rank's chunk.
      if (in_place && me > 0) {
        SHARDSCOPE_NCCL_CUDA_CHECK(cudaMemcpyAsync(out + me * count * element, out, count * element,
                                                   cudaMemcpyDeviceToDevice, stream_));
        in = out + me * count * element;
      }
      SHARDSCOPE_NCCL_CHECK(ncclAllGather(in, out, count, type, comm_, stream_));
      return;
    case CollectiveKind::reduce_scatter:
      // In place, NCCL leaves the rank's chunk where it was in send; ours goes to recv's start.
      SHARDSCOPE_NCCL_CHECK(ncclReduceScatter(in, in_place ? out + me * chunk * element : out,
                                              chunk, type, nccl_op(call.reduce), comm_, stream_));
      if (in_place && me > 0) {
        SHARDSCOPE_NCCL_CUDA_CHECK(cudaMemcpyAsync(out, out + me * chunk * element, chunk * element,
                                                   cudaMemcpyDeviceToDevice, stream_));
      }
      return;
    case CollectiveKind::all_to_all:
      launch_all_to_all(call, in, out);
      return;
    case CollectiveKind::broadcast:
      SHARDSCOPE_NCCL_CHECK(ncclBroadcast(rank() == call.root ? in : out, out, count, type,
                                          call.root, comm_, stream_));
      return;
    case CollectiveKind::barrier:
      return;
  }
}

// Chunk j of send goes to rank j, chunk i of recv comes from rank i: one send and one receive per
// peer inside a group, so NCCL runs them together.
void NcclComm::launch_all_to_all(const CollectiveCall& call, const unsigned char* send,
                                 unsigned char* recv) {
  const ncclDataType_t type = nccl_type(call.dtype);
  const std::size_t chunk = static_cast<std::size_t>(call.count) / static_cast<std::size_t>(size());
  const std::size_t chunk_bytes = chunk * dtype_size(call.dtype);
  std::unique_ptr<DeviceScratch> copy;  // in place: the peers read a copy of send
  if (send == recv) {
    copy = std::make_unique<DeviceScratch>(chunk_bytes * static_cast<std::size_t>(size()));
    SHARDSCOPE_NCCL_CUDA_CHECK(cudaMemcpyAsync(copy->data(), send,
                                               chunk_bytes * static_cast<std::size_t>(size()),
                                               cudaMemcpyDeviceToDevice, stream_));
    send = copy->data();
  }
  ncclResult_t first_error = ncclGroupStart();
  for (int peer = 0; peer < size() && first_error == ncclSuccess; ++peer) {
    const std::size_t at = static_cast<std::size_t>(peer) * chunk_bytes;
    first_error = ncclSend(send + at, chunk, type, peer, comm_, stream_);
    if (first_error == ncclSuccess)
      first_error = ncclRecv(recv + at, chunk, type, peer, comm_, stream_);
  }
  const ncclResult_t end = ncclGroupEnd();  // always: a started group must end
  SHARDSCOPE_NCCL_CHECK(first_error);
  SHARDSCOPE_NCCL_CHECK(end);
  if (copy) SHARDSCOPE_NCCL_CUDA_CHECK(cudaStreamSynchronize(stream_));  // before the copy is freed
}

// Polls instead of blocking in cudaStreamSynchronize: a peer that failed never joins the kernel,
// which would then wait for ever. A failure anywhere in the run, an asynchronous NCCL error or the
// timeout aborts this rank's communicator and ends the collective with a CommError.
void NcclComm::wait_until_done(const CollectiveCall& call) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t state = cudaStreamQuery(stream_);
    if (state == cudaSuccess) return;
    if (state != cudaErrorNotReady) {
      fail_on_device("rank " + std::to_string(rank()) + ": " + call.str() +
                     " on cuda:" + std::to_string(device_) + ": " + cudaGetErrorName(state) + ": " +
                     cudaGetErrorString(state));
    }
    ncclResult_t async = ncclSuccess;
    SHARDSCOPE_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
    if (async != ncclSuccess && async != ncclInProgress) {
      fail_on_device("rank " + std::to_string(rank()) + ": " + call.str() + ": NCCL error " +
                     ncclGetErrorString(async));
    }
    const std::string failure = failure_->message();
    if (!failure.empty()) fail_on_device(failure);
    if (options_.timeout.count() > 0 &&
        std::chrono::steady_clock::now() - start > options_.timeout) {
      fail_on_device("rank " + std::to_string(rank()) + ": " + call.str() +
                     " did not finish on cuda:" + std::to_string(device_) + " within " +
                     std::to_string(options_.timeout.count()) + " ms");
    }
    std::this_thread::yield();
  }
}

void NcclComm::fail_on_device(const std::string& message) {
  failure_->set(message);
  ncclCommAbort(comm_);  // ends the kernels still waiting for peers; the error is `message`
  comm_ = nullptr;
  throw CommError(failure_->message());
}

std::unique_ptr<Communicator> NcclComm::split(int color, int key) {
  throw_if_unusable();
  // The host split is a checked collective over every rank and orders the new ranks by (key,
  // rank); the NCCL communicator of each color is then bootstrapped over it.
  // The new group shares this run's failure state: a rank failing anywhere releases its waiters.
  std::unique_ptr<NcclComm> group =
      join_nccl_group(host_->split(color, key), device_, options_, failure_);
  group->compute_ = compute_;
  return group;
}

void NcclComm::abort(const std::string& reason) {
  failure_->set("rank " + std::to_string(rank()) + " failed: " + reason);
  host_->abort(reason);  // threads: releases ranks in a host check; MPI: ends the job
}

// Host rank 0 makes the unique id, the host communicator carries it to every rank, and each rank
// joins on its device (ncclCommInitRank waits for every rank of the new communicator).
std::unique_ptr<NcclComm> join_nccl_group(std::unique_ptr<Communicator> host, int device,
                                          const NcclOptions& options,
                                          std::shared_ptr<NcclFailure> failure) {
  ncclUniqueId id{};
  if (host->rank() == 0) SHARDSCOPE_NCCL_CHECK(ncclGetUniqueId(&id));
  CollectiveCall share;
  share.kind = CollectiveKind::broadcast;
  share.dtype = DType::u8;
  share.count = static_cast<std::int64_t>(sizeof id);
  share.root = 0;
  share.site.op = "the NCCL unique id";
  host->run(share, &id, &id);
  SHARDSCOPE_NCCL_CUDA_CHECK(cudaSetDevice(device));
  ncclComm_t comm = nullptr;
  SHARDSCOPE_NCCL_CHECK(ncclCommInitRank(&comm, host->size(), id, host->rank()));
  return std::make_unique<NcclComm>(comm, device, std::move(host), std::move(failure), options);
}

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_nccl_thread_comms(const std::vector<int>& devices,
                                                                  const NcclOptions& options) {
  const int n = static_cast<int>(devices.size());
  if (n < 1) throw ArgumentError("an NCCL group needs at least one device");
  std::vector<ncclComm_t> handles(devices.size(), nullptr);
  SHARDSCOPE_NCCL_CHECK(ncclCommInitAll(handles.data(), n, devices.data()));
  ThreadCommOptions host_options;
  if (options.timeout.count() > 0) host_options.timeout = options.timeout;
  std::vector<std::unique_ptr<Communicator>> hosts = make_thread_comms(n, host_options);
  auto failure = std::make_shared<NcclFailure>();
  std::vector<std::unique_ptr<Communicator>> comms;
  for (std::size_t r = 0; r < devices.size(); ++r) {
    comms.push_back(
        std::make_unique<NcclComm>(handles[r], devices[r], std::move(hosts[r]), failure, options));
  }
  return comms;
}

std::unique_ptr<Communicator> make_nccl_comm(std::unique_ptr<Communicator> host, int device,
                                             const NcclOptions& options) {
  return join_nccl_group(std::move(host), device, options, std::make_shared<NcclFailure>());
}

}  // namespace shardscope
