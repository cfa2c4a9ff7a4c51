// HostStagingComm: device buffers copied to host memory, a host collective, the result copied back.
#include "parallel/comm/host_staging_comm.h"

#include <cstdint>
#include <cstdlib>
#include <new>

#include "autograd/backend.h"
#include "autograd/context.h"

namespace shardscope {

namespace {

// A grow-only host buffer whose data starts at the same offset modulo 4 KiB as the buffer it is
// copied from or to: glibc's memcpy runs many times slower for some other distances between source
// and destination (docs/benchmarks.md), which the CPU backend's calloc'd storage (16 bytes past a
// page) against a page-aligned buffer hits. Device pointers are page-aligned; harmless there.
class HostBuffer {
 public:
  unsigned char* reserve(std::size_t bytes, const void* partner) {
    const std::size_t offset = reinterpret_cast<std::uintptr_t>(partner) % kPage;
    if (bytes + offset > capacity_) {
      const std::size_t rounded = (bytes + kPage + kPage - 1) / kPage * kPage;
      void* p = std::aligned_alloc(kPage, rounded);
      if (p == nullptr) throw std::bad_alloc();
      data_.reset(static_cast<unsigned char*>(p));
      capacity_ = rounded;
    }
    return data_.get() + offset;
  }

 private:
  static constexpr std::size_t kPage = 4096;
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char, Free> data_;
  std::size_t capacity_ = 0;
};

class HostStagingComm final : public Communicator {
 public:
  HostStagingComm(std::unique_ptr<Communicator> host, Backend* backend)
      : host_(std::move(host)), backend_(backend) {}

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const char* backend_name() const override { return host_->backend_name(); }
  void attach(Context& ctx) override { backend_ = &ctx.backend(); }
  void abort(const std::string& reason) override { host_->abort(reason); }
  std::unique_ptr<Communicator> split(int color, int key) override {
    return std::make_unique<HostStagingComm>(host_->split(color, key), backend_);
  }

  // Host copies of the buffers, reused from call to call (the host collective has finished with
  // them when run returns). The send copy is skipped for a null buffer: only a malformed call has
  // one with elements, and the host communicator's checks refuse it.
  void run(const CollectiveCall& call, const void* send, void* recv) override {
    Backend& backend = attached("a collective");
    const std::size_t element = dtype_size(call.dtype);
    const auto send_bytes = static_cast<std::size_t>(send_elements(call, size())) * element;
    const auto recv_bytes = static_cast<std::size_t>(recv_elements(call, size())) * element;
    unsigned char* send_host = send_bytes ? send_host_.reserve(send_bytes, send) : nullptr;
    unsigned char* recv_host = recv_bytes ? recv_host_.reserve(recv_bytes, recv) : nullptr;
    if (send != nullptr && send_host) backend.copy_to_host(send_host, send, send_bytes);
    host_->run(call, send_host, recv_host);
    if (recv != nullptr && recv_host) backend.copy_from_host(recv, recv_host, recv_bytes);
  }

  void send(const void* data, std::size_t bytes, int peer) override {
    Backend& backend = attached("send");
    unsigned char* host = send_host_.reserve(bytes, data);
    if (bytes) backend.copy_to_host(host, data, bytes);
    host_->send(host, bytes, peer);
  }
  void recv(void* data, std::size_t bytes, int peer) override {
    Backend& backend = attached("recv");
    unsigned char* host = recv_host_.reserve(bytes, data);
    host_->recv(host, bytes, peer);
    if (bytes) backend.copy_from_host(data, host, bytes);
  }

 private:
  Backend& attached(const char* what) const {
    if (backend_ == nullptr) {
      throw StateError("rank " + std::to_string(rank()) + ": " + what +
                       " on a host-staging communicator before attach(context): it needs the "
                       "backend that owns the buffers");
    }
    return *backend_;
  }

  std::unique_ptr<Communicator> host_;
  Backend* backend_;  // the attached context's; not owned
  HostBuffer send_host_, recv_host_;
};

}  // namespace

std::unique_ptr<Communicator> make_host_staging_comm(std::unique_ptr<Communicator> host) {
  if (!host) throw ArgumentError("make_host_staging_comm: no host communicator given");
  return std::make_unique<HostStagingComm>(std::move(host), nullptr);
}

}  // namespace shardscope
