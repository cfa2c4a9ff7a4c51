// NcclComm: the host-side call check, then one NCCL call on the device buffers, then a bounded
// wait for it to finish that watches for a failed peer. Every communicator is non-blocking, so
// joining, enqueuing (which connects peers at a first collective) and finishing are all polls.
#include "parallel/comm/nccl_comm.h"

#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "autograd/context.h"
#include "autograd/cuda/cuda_backend.h"
#include "parallel/comm/thread_comm.h"

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
  // The failed call's status stays the runtime's last error, which the CUDA backend's next launch
  // check would report as its own; it is in this error, so it is reset (a sticky one comes back).
  cudaGetLastError();
  throw CommError(std::string(file) + ":" + std::to_string(line) + ": " + what +
                  " failed: " + cudaGetErrorName(code) + ": " + cudaGetErrorString(code));
}

namespace {

using Clock = std::chrono::steady_clock;

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
    case DType::bf16:
    case DType::f16:
      break;  // the CUDA backend runs f32 and f64 only (autograd/cuda)
  }
  throw ArgumentError(std::string("NcclComm moves f32, f64 and u8, given ") + dtype_name(dtype));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  return op == ReduceOp::sum ? ncclSum : ncclMax;
}

// Non-blocking: NCCL calls return ncclInProgress instead of waiting, and ncclCommAbort may end
// the communicator at any point (NCCL's fault tolerance needs this).
ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// A poll that found the work still running may leave cudaErrorNotReady as the runtime's last
// error; reset it so that no launch check reports it (only that one: others are real).
void forget_not_ready() {
  if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
}

std::string nccl_error_text(ncclResult_t code) {
  std::string text = ncclGetErrorString(code);
  const char* detail = ncclGetLastError(nullptr);
  if (detail != nullptr && detail[0] != '\0') text += " (" + std::string(detail) + ")";
  return text;
}

// Device memory for the copy an in-place all-to-all needs and for the warm-up; freed on every
// path (cudaFree waits for the device, so for an aborted collective's kernels to end).
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
  // Owns `comm`, a non-blocking communicator that may still be joining (null if joining failed at
  // once): finish_joining waits for it.
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

  // Creation, in this order (the thread comms do each step for every rank before the next, the
  // enqueue inside one NCCL group): finish_joining with what ncclCommInitRankConfig (or the
  // group) returned, prepare_warm_up, enqueue_warm_up, finish_warm_up with what that returned.
  void finish_joining(ncclResult_t joining);
  void prepare_warm_up();
  ncclResult_t enqueue_warm_up() noexcept;
  void finish_warm_up(ncclResult_t enqueued);

 private:
  // On every way out of run(), later work on the compute stream waits for what run() queued on
  // the NCCL stream, so a buffer that unwinding gives back to the caching allocator is reused only
  // once NCCL stopped writing it (an aborted collective's kernels end soon after the abort).
  struct ComputeWaitsForNccl {
    NcclComm& comm;
    ~ComputeWaitsForNccl() { comm.compute_waits_for_nccl(); }
  };

  void check_calls(const CollectiveCall& call);
  void launch(const CollectiveCall& call, const void* send, void* recv,
              std::unique_ptr<DeviceScratch>& scratch);
  void launch_all_to_all(const CollectiveCall& call, const unsigned char* send, unsigned char* recv,
                         std::unique_ptr<DeviceScratch>& scratch);
  bool order_after_compute();
  void compute_waits_for_nccl() noexcept;
  void enqueued(ncclResult_t result, const std::string& what);
  void settle(const std::string& what);
  void wait_until_done(const std::string& what, bool after_compute);
  ncclResult_t nccl_state(const std::string& what);
  bool finished(cudaError_t state, const std::string& what);
  void check_failure();
  void check_timeout(const std::string& what, Clock::time_point start,
                     std::chrono::milliseconds limit);
  [[noreturn]] void fail_on_device(const std::string& message);
  void release_nccl(bool abort) noexcept;
  void throw_if_unusable() const;
  std::string on_device(const std::string& what) const;
  std::chrono::milliseconds wait_limit() const {
    return creating_ ? options_.create_timeout : options_.timeout;
  }

  ncclComm_t comm_;
  int device_;
  std::unique_ptr<Communicator> host_;  // the same ranks on host memory: checks, barrier, split
  std::shared_ptr<NcclFailure> failure_;
  NcclOptions options_;
  bool creating_ = true;  // until the warm-up finished: waits use options_.create_timeout
  // The collectives run on a stream of their own. Before each one, an event recorded on the
  // compute stream (the attached context's CUDA backend) makes this stream wait for the kernels
  // that wrote the send buffer; run() returns once the collective finished, so the kernels after
  // it are ordered too (the engine is synchronous). Without an attached context (a communicator
  // used on its own), run() waits for the whole device instead.
  cudaStream_t compute_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;  // on compute_: the collective's inputs are written
  cudaEvent_t done_ = nullptr;   // on stream_: the collective ended (or was aborted)
  std::unique_ptr<DeviceScratch> warm_up_;
};

NcclComm::~NcclComm() {
  cudaSetDevice(device_);
  // After a failure, or while an exception unwinds this rank, a peer may never join what is
  // queued or end the communicator with us: abort (ends the kernels) instead of destroying.
  release_nccl(!failure_->message().empty() || std::uncaught_exceptions() > 0);
  warm_up_.reset();
  if (done_ != nullptr) cudaEventDestroy(done_);
  if (ready_ != nullptr) cudaEventDestroy(ready_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void NcclComm::release_nccl(bool abort) noexcept {
  if (comm_ == nullptr) return;
  if (abort) {
    ncclCommAbort(comm_);
  } else {
    ncclCommDestroy(comm_);
  }
  comm_ = nullptr;
}

std::string NcclComm::on_device(const std::string& what) const {
  return "rank " + std::to_string(rank()) + ": " + what + " on cuda:" + std::to_string(device_);
}

void NcclComm::attach(Context& ctx) {
  if (ctx.device().kind != DeviceKind::cuda) {
    throw ArgumentError("rank " + std::to_string(rank()) +
                        ": the NCCL communicator needs a context on a CUDA device, given " +
                        ctx.device().str());
  }
  if (ctx.device().index != device_) {
    throw ArgumentError("rank " + std::to_string(rank()) + ": the NCCL communicator runs on cuda:" +
                        std::to_string(device_) + ", given a context on " + ctx.device().str() +
                        " (a rank's context and communicator must be on the same device)");
  }
  compute_ = static_cast<cudaStream_t>(cuda_backend_stream(ctx.backend()));
}

// Orders this stream after the compute stream's work; false when there is no compute stream to
// follow, after waiting for the whole device instead (this communicator's stream is idle here).
bool NcclComm::order_after_compute() {
  if (compute_ == nullptr) {
    SHARDSCOPE_NCCL_CUDA_CHECK(cudaDeviceSynchronize());
    return false;
  }
  SHARDSCOPE_NCCL_CUDA_CHECK(cudaEventRecord(ready_, compute_));
  SHARDSCOPE_NCCL_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
  return true;
}

void NcclComm::compute_waits_for_nccl() noexcept {
  if (compute_ == nullptr) return;
  if (cudaEventRecord(done_, stream_) == cudaSuccess) cudaStreamWaitEvent(compute_, done_, 0);
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
  const bool after_compute = order_after_compute();  // the backend's work on the buffers first
  std::unique_ptr<DeviceScratch> scratch;  // freed after the guard: once NCCL is done with it
  const ComputeWaitsForNccl guard{*this};
  launch(call, send, recv, scratch);
  wait_until_done(call.str(), after_compute);
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

void NcclComm::launch(const CollectiveCall& call, const void* send, void* recv,
                      std::unique_ptr<DeviceScratch>& scratch) {
  const ncclDataType_t type = nccl_type(call.dtype);
  const std::size_t element = dtype_size(call.dtype);
  const auto count = static_cast<std::size_t>(call.count);
  const std::size_t chunk = count / static_cast<std::size_t>(size());  // checked to divide
  const auto me = static_cast<std::size_t>(rank());
  const auto* in = static_cast<const unsigned char*>(send);
  auto* out = static_cast<unsigned char*>(recv);
  const bool in_place = in == out;
  const std::string what = call.str();
  switch (call.kind) {
    case CollectiveKind::all_reduce:
      enqueued(ncclAllReduce(in, out, count, type, nccl_op(call.reduce), comm_, stream_), what);
      return;
    case CollectiveKind::all_gather:
      // In place, this rank's values start recv; NCCL wants them at the rank's chunk.
      if (in_place && me > 0) {
        SHARDSCOPE_NCCL_CUDA_CHECK(cudaMemcpyAsync(out + me * count * element, out, count * element,
                                                   cudaMemcpyDeviceToDevice, stream_));
        in = out + me * count * element;
      }
      enqueued(ncclAllGather(in, out, count, type, comm_, stream_), what);
      return;
    case CollectiveKind::reduce_scatter:
      // In place, NCCL leaves the rank's chunk where it was in send; ours goes to recv's start.
      enqueued(ncclReduceScatter(in, in_place ? out + me * chunk * element : out, chunk, type,
                                 nccl_op(call.reduce), comm_, stream_),
               what);
      if (in_place && me > 0) {  // after enqueued(): nothing goes on the stream while enqueuing
        SHARDSCOPE_NCCL_CUDA_CHECK(cudaMemcpyAsync(out, out + me * chunk * element, chunk * element,
                                                   cudaMemcpyDeviceToDevice, stream_));
      }
      return;
    case CollectiveKind::all_to_all:
      launch_all_to_all(call, in, out, scratch);
      return;
    case CollectiveKind::broadcast:
      enqueued(ncclBroadcast(rank() == call.root ? in : out, out, count, type, call.root, comm_,
                             stream_),
               what);
      return;
    case CollectiveKind::barrier:
      return;
  }
}

// Chunk j of send goes to rank j, chunk i of recv comes from rank i: one send and one receive per
// peer inside a group, so NCCL runs them together. In place, the peers read a copy of send, which
// `scratch` keeps until run() is done with the stream.
void NcclComm::launch_all_to_all(const CollectiveCall& call, const unsigned char* send,
                                 unsigned char* recv, std::unique_ptr<DeviceScratch>& scratch) {
  const ncclDataType_t type = nccl_type(call.dtype);
  const std::size_t chunk = static_cast<std::size_t>(call.count) / static_cast<std::size_t>(size());
  const std::size_t chunk_bytes = chunk * dtype_size(call.dtype);
  if (send == recv) {
    const std::size_t bytes = chunk_bytes * static_cast<std::size_t>(size());
    scratch = std::make_unique<DeviceScratch>(bytes);
    SHARDSCOPE_NCCL_CUDA_CHECK(
        cudaMemcpyAsync(scratch->data(), send, bytes, cudaMemcpyDeviceToDevice, stream_));
    send = scratch->data();
  }
  ncclResult_t first_error = ncclGroupStart();
  for (int peer = 0; peer < size() && first_error == ncclSuccess; ++peer) {
    const std::size_t at = static_cast<std::size_t>(peer) * chunk_bytes;
    first_error = ncclSend(send + at, chunk, type, peer, comm_, stream_);
    if (first_error == ncclSuccess)
      first_error = ncclRecv(recv + at, chunk, type, peer, comm_, stream_);
  }
  const ncclResult_t end = ncclGroupEnd();  // always: a started group must end
  enqueued(first_error == ncclSuccess ? end : first_error, call.str());
}

// After an NCCL call on this communicator: a non-blocking call may still be enqueuing (joining,
// or connecting the peers at a first collective); nothing may go on the stream until it is done.
// Any other result than success is an error that fails the group.
void NcclComm::enqueued(ncclResult_t result, const std::string& what) {
  if (result == ncclInProgress) {
    settle(what);
  } else if (result != ncclSuccess) {
    fail_on_device(on_device(what) + ": " + nccl_error_text(result));
  }
}

// Waits for the communicator's state to leave ncclInProgress, watching for a failed peer and the
// time limit.
void NcclComm::settle(const std::string& what) {
  const Clock::time_point start = Clock::now();
  while (nccl_state(what) == ncclInProgress) {
    check_failure();
    check_timeout(what, start, wait_limit());
    std::this_thread::yield();
  }
}

// The communicator's state: ncclSuccess or ncclInProgress; an error fails the group.
ncclResult_t NcclComm::nccl_state(const std::string& what) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t asked = ncclCommGetAsyncError(comm_, &state);
  if (asked != ncclSuccess) {
    fail_on_device(on_device(what) + ": ncclCommGetAsyncError: " + nccl_error_text(asked));
  }
  if (state != ncclSuccess && state != ncclInProgress) {
    fail_on_device(on_device(what) + ": NCCL error " + nccl_error_text(state));
  }
  return state;
}

// Polls instead of blocking in cudaStreamSynchronize: a peer that failed never joins the kernel,
// which would then wait for ever. The time limit counts from when the compute the collective
// follows has finished (the ready event), so kernels queued before it do not count as waiting.
void NcclComm::wait_until_done(const std::string& what, bool after_compute) {
  std::optional<Clock::time_point> start;
  if (!after_compute) start = Clock::now();
  for (;;) {
    if (!start && finished(cudaEventQuery(ready_), what)) start = Clock::now();
    if (finished(cudaStreamQuery(stream_), what)) return;
    nccl_state(what);
    check_failure();
    if (start) check_timeout(what, *start, wait_limit());
    std::this_thread::yield();
  }
}

// True when the queried work has finished, false while it runs; a CUDA error fails the group.
bool NcclComm::finished(cudaError_t state, const std::string& what) {
  if (state == cudaSuccess) return true;
  if (state == cudaErrorNotReady) {
    forget_not_ready();
    return false;
  }
  cudaGetLastError();  // the status is in the error below
  fail_on_device(on_device(what) + ": " + cudaGetErrorName(state) + ": " +
                 cudaGetErrorString(state));
}

void NcclComm::check_failure() {
  const std::string failure = failure_->message();
  if (!failure.empty()) fail_on_device(failure);
}

void NcclComm::check_timeout(const std::string& what, Clock::time_point start,
                             std::chrono::milliseconds limit) {
  if (limit.count() > 0 && Clock::now() - start > limit) {
    fail_on_device(on_device(what) + " did not finish within " + std::to_string(limit.count()) +
                   " ms");
  }
}

// Records the run's failure (the first one wins: every rank reports it), aborts this rank's NCCL
// communicator, which ends its kernels still waiting for peers, and throws.
void NcclComm::fail_on_device(const std::string& message) {
  failure_->set(message);
  release_nccl(/*abort=*/true);
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

// The rank failed: every rank waiting on its device or in a host check learns it (the shared
// failure, host_->abort), and this rank's NCCL communicator is aborted, so that no kernel of it
// waits on. The launchers call it on the rank's own thread, which is not inside an NCCL call then
// (NCCL allows no other call on a communicator during ncclCommAbort).
void NcclComm::abort(const std::string& reason) {
  failure_->set("rank " + std::to_string(rank()) + " failed: " + reason);
  cudaSetDevice(device_);
  release_nccl(/*abort=*/true);
  host_->abort(reason);  // threads: releases ranks in a host check; MPI: ends the job
}

void NcclComm::finish_joining(ncclResult_t joining) {
  const std::string what = "joining the NCCL group (ncclCommInitRankConfig)";
  if (comm_ == nullptr) fail_on_device(on_device(what) + ": " + nccl_error_text(joining));
  enqueued(joining, what);
  settle(what);  // in a group, the call itself returned ncclSuccess before the group joined
  SHARDSCOPE_NCCL_CUDA_CHECK(cudaSetDevice(device_));
  SHARDSCOPE_NCCL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  SHARDSCOPE_NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  SHARDSCOPE_NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
}

// NCCL connects the peers and allocates its buffers at a communicator's first collective. An
// all-reduce of one float at creation does that while the caching allocator holds little of the
// device, rather than at the first real collective, when the cache may hold most of it.
void NcclComm::prepare_warm_up() {
  SHARDSCOPE_NCCL_CUDA_CHECK(cudaSetDevice(device_));
  warm_up_ = std::make_unique<DeviceScratch>(sizeof(float));
  SHARDSCOPE_NCCL_CUDA_CHECK(cudaMemsetAsync(warm_up_->data(), 0, sizeof(float), stream_));
}

ncclResult_t NcclComm::enqueue_warm_up() noexcept {
  return ncclAllReduce(warm_up_->data(), warm_up_->data(), 1, ncclFloat32, ncclSum, comm_, stream_);
}

void NcclComm::finish_warm_up(ncclResult_t enqueued_result) {
  const std::string what = "the warm-up all_reduce of a new NCCL communicator";
  enqueued(enqueued_result, what);
  settle(what);  // inside a group, the call itself returned ncclSuccess
  wait_until_done(what, /*after_compute=*/false);
  warm_up_.reset();
  creating_ = false;
}

// Host rank 0 makes the unique id, the host communicator carries it to every rank, and each rank
// joins on its device, then warms the communicator up.
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
  ncclConfig_t config = nonblocking_config();
  ncclComm_t comm = nullptr;
  const int size = host->size(), rank = host->rank();
  const ncclResult_t joining = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  auto group =
      std::make_unique<NcclComm>(comm, device, std::move(host), std::move(failure), options);
  group->finish_joining(joining);
  group->prepare_warm_up();
  group->finish_warm_up(group->enqueue_warm_up());
  return group;
}

// Every rank's communicator of a threads run, joined and warmed up by this thread: each step is
// one NCCL group over every device (NCCL's way for one thread to drive several ranks), then a
// poll of each communicator. A failure aborts them all.
std::vector<std::unique_ptr<Communicator>> join_thread_group(
    const std::vector<int>& devices, std::vector<std::unique_ptr<Communicator>> hosts,
    const NcclOptions& options) {
  const int n = static_cast<int>(devices.size());
  for (int device : devices) SHARDSCOPE_NCCL_CUDA_CHECK(cudaSetDevice(device));
  ncclUniqueId id{};
  SHARDSCOPE_NCCL_CHECK(ncclGetUniqueId(&id));
  ncclConfig_t config = nonblocking_config();
  std::vector<ncclComm_t> handles(devices.size(), nullptr);
  ncclResult_t joining = ncclGroupStart();
  for (int r = 0; r < n && joining == ncclSuccess; ++r) {
    cudaSetDevice(devices[static_cast<std::size_t>(r)]);  // checked above
    joining = ncclCommInitRankConfig(&handles[static_cast<std::size_t>(r)], n, id, r, &config);
  }
  const ncclResult_t end = ncclGroupEnd();  // always: a started group must end
  if (joining == ncclSuccess) joining = end;
  auto failure = std::make_shared<NcclFailure>();
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<NcclComm*> nccl;
  for (std::size_t r = 0; r < devices.size(); ++r) {
    auto comm =
        std::make_unique<NcclComm>(handles[r], devices[r], std::move(hosts[r]), failure, options);
    nccl.push_back(comm.get());
    comms.push_back(std::move(comm));
  }
  try {
    for (NcclComm* comm : nccl) comm->finish_joining(joining);
    for (NcclComm* comm : nccl) comm->prepare_warm_up();
    ncclResult_t warm_up = ncclGroupStart();
    for (NcclComm* comm : nccl) {
      if (warm_up == ncclSuccess) warm_up = comm->enqueue_warm_up();
    }
    const ncclResult_t warm_up_end = ncclGroupEnd();
    if (warm_up == ncclSuccess) warm_up = warm_up_end;
    for (NcclComm* comm : nccl) comm->finish_warm_up(warm_up);
  } catch (const std::exception& e) {
    failure->set(e.what());  // the communicators abort as they end
    close_nccl_thread_comms(comms);
    throw;
  }
  return comms;
}

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_nccl_thread_comms(const std::vector<int>& devices,
                                                                  const NcclOptions& options) {
  const int n = static_cast<int>(devices.size());
  if (n < 1) throw ArgumentError("an NCCL group needs at least one device");
  ThreadCommOptions host_options;
  if (options.timeout.count() > 0) host_options.timeout = options.timeout;
  return join_thread_group(devices, make_thread_comms(n, host_options), options);
}

void close_nccl_thread_comms(std::vector<std::unique_ptr<Communicator>>& comms) noexcept {
  std::vector<std::thread> closers;
  for (std::unique_ptr<Communicator>& comm : comms) {
    try {
      closers.emplace_back([&comm] { comm.reset(); });
    } catch (const std::exception&) {
      comm.reset();  // no thread for it: end it here
    }
  }
  for (std::thread& closer : closers) closer.join();
  comms.clear();
}

std::unique_ptr<Communicator> make_nccl_comm(std::unique_ptr<Communicator> host, int device,
                                             const NcclOptions& options) {
  return join_nccl_group(std::move(host), device, options, std::make_shared<NcclFailure>());
}

}  // namespace shardscope
