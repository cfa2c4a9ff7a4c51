// HostStagingComm: device buffers copied to host memory, a host collective, the result copied back.
#include "parallel/host_staging_comm.h"

#include <vector>

#include "autograd/backend.h"
#include "autograd/context.h"

namespace shardscope {

namespace {

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
    send_host_.resize(send_bytes);
    recv_host_.resize(recv_bytes);
    if (send != nullptr && send_bytes) backend.copy_to_host(send_host_.data(), send, send_bytes);
    host_->run(call, send_bytes ? send_host_.data() : nullptr,
               recv_bytes ? recv_host_.data() : nullptr);
    if (recv != nullptr && recv_bytes) backend.copy_from_host(recv, recv_host_.data(), recv_bytes);
  }

  void send(const void* data, std::size_t bytes, int peer) override {
    Backend& backend = attached("send");
    send_host_.resize(bytes);
    if (bytes) backend.copy_to_host(send_host_.data(), data, bytes);
    host_->send(send_host_.data(), bytes, peer);
  }
  void recv(void* data, std::size_t bytes, int peer) override {
    Backend& backend = attached("recv");
    recv_host_.resize(bytes);
    host_->recv(recv_host_.data(), bytes, peer);
    if (bytes) backend.copy_from_host(data, recv_host_.data(), bytes);
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
  std::vector<unsigned char> send_host_, recv_host_;
};

}  // namespace

std::unique_ptr<Communicator> make_host_staging_comm(std::unique_ptr<Communicator> host) {
  if (!host) throw ArgumentError("make_host_staging_comm: no host communicator given");
  return std::make_unique<HostStagingComm>(std::move(host), nullptr);
}

}  // namespace shardscope
