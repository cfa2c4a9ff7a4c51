// ThreadComm: a rendezvous per collective over shared memory, with checks and timeouts.
#include "parallel/thread_comm.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

namespace shardscope {
namespace {

// The state the ranks of one group share. A collective is a round: every rank arrives with its
// call and buffers; the last to arrive checks the calls; each rank then computes its own output
// by reading the others' send buffers; the round ends when every rank has departed, so no send
// buffer is released while a peer may still read it. A failure (abort, timeout) ends a round only
// before its calls matched: once every rank arrived, every rank computes and departs, because
// its peers are reading its send buffer. A failure reaches the groups split from this one.
class ThreadGroup {
 public:
  ThreadGroup(int size, std::chrono::milliseconds timeout)
      : size_(size),
        timeout_(timeout),
        slots_(static_cast<std::size_t>(size)),
        last_(static_cast<std::size_t>(size), "none") {}

  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  void run(int rank, const CollectiveCall& call, const void* send, void* recv);
  void send(int from, int to, const void* data, std::size_t bytes);
  void recv(int to, int from, void* data, std::size_t bytes);
  void abort(int rank, const std::string& reason);
  // Fails this group (if not failed yet) and every group split from it, waking their waiters.
  void fail_all(const std::string& message);
  // The group that ranks of `color` form in the split numbered `split` (made once, then shared).
  std::shared_ptr<ThreadGroup> subgroup(std::uint64_t split, int color, int size);

 private:
  struct Slot {
    CollectiveCall call;
    const void* send = nullptr;
    void* recv = nullptr;
    bool present = false;
  };

  void compute(int rank, void* out) const;
  std::string mismatch_locked() const;
  std::string where_everyone_is_locked() const;
  [[noreturn]] void fail_locked(const std::string& message);
  void throw_if_failed_locked() const;
  template <class Pred>
  void wait_locked(std::unique_lock<std::mutex>& lock, Pred done, const char* stage);

  const int size_;
  const std::chrono::milliseconds timeout_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;
  std::vector<std::string> last_;  // each rank's last completed collective
  int arrived_ = 0;
  int departed_ = 0;
  bool computing_ = false;
  std::uint64_t round_ = 0;
  std::string failure_;  // set once: the group is failed for good
  std::map<std::pair<std::uint64_t, int>, std::shared_ptr<ThreadGroup>> subgroups_;
  // Point-to-point messages in flight, by (from, to), oldest first.
  std::map<std::pair<int, int>, std::deque<std::vector<unsigned char>>> mailboxes_;
};

void check_peer(const char* what, int rank, int peer, int size) {
  if (peer < 0 || peer >= size) {
    throw ArgumentError("rank " + std::to_string(rank) + ": " + what + " with peer " +
                        std::to_string(peer) + ", expected a rank in 0.." +
                        std::to_string(size - 1));
  }
}

void ThreadGroup::send(int from, int to, const void* data, std::size_t bytes) {
  check_peer("send", from, to, size_);
  const auto* p = static_cast<const unsigned char*>(data);
  std::vector<unsigned char> message(p, p + bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  throw_if_failed_locked();
  mailboxes_[{from, to}].push_back(std::move(message));
  cv_.notify_all();
}

void ThreadGroup::recv(int to, int from, void* data, std::size_t bytes) {
  check_peer("recv", to, from, size_);
  std::unique_lock<std::mutex> lock(mutex_);
  std::deque<std::vector<unsigned char>>& box = mailboxes_[{from, to}];
  const bool arrived =
      cv_.wait_for(lock, timeout_, [&] { return !box.empty() || !failure_.empty(); });
  throw_if_failed_locked();
  if (!arrived) {
    fail_locked("rank " + std::to_string(to) + " waited " + std::to_string(timeout_.count()) +
                " ms in recv of " + std::to_string(bytes) + " bytes from rank " +
                std::to_string(from) + ", which sent it nothing");
  }
  std::vector<unsigned char> message = std::move(box.front());
  box.pop_front();
  if (message.size() != bytes) {
    fail_locked("rank " + std::to_string(to) + " called recv of " + std::to_string(bytes) +
                " bytes from rank " + std::to_string(from) + ", whose message has " +
                std::to_string(message.size()) + " bytes");
  }
  if (bytes) std::memcpy(data, message.data(), bytes);
}

void ThreadGroup::throw_if_failed_locked() const {
  if (!failure_.empty()) throw CommError(failure_);
}

void ThreadGroup::fail_locked(const std::string& message) {
  if (failure_.empty()) failure_ = message;
  cv_.notify_all();
  throw CommError(failure_);
}

std::string ThreadGroup::mismatch_locked() const {
  bool same = true;
  for (const Slot& s : slots_) same = same && s.call.same_as(slots_[0].call);
  if (same) return "";
  std::string out = "collective mismatch: the ranks of a group of " + std::to_string(size_) +
                    " issued different calls:";
  for (int r = 0; r < size_; ++r) {
    out += "\n  rank " + std::to_string(r) + " calls " +
           slots_[static_cast<std::size_t>(r)].call.str();
  }
  return out;
}

std::string ThreadGroup::where_everyone_is_locked() const {
  std::string out;
  for (int r = 0; r < size_; ++r) {
    const auto u = static_cast<std::size_t>(r);
    out += "\n  rank " + std::to_string(r) +
           (slots_[u].present ? " waits in " + slots_[u].call.str()
                              : " has not arrived (last completed: " + last_[u] + ")");
  }
  return out;
}

template <class Pred>
void ThreadGroup::wait_locked(std::unique_lock<std::mutex>& lock, Pred done, const char* stage) {
  if (cv_.wait_for(lock, timeout_, [&] { return done() || !failure_.empty(); })) return;
  fail_locked("collective timed out after " + std::to_string(timeout_.count()) + " ms (" + stage +
              "); where every rank is:" + where_everyone_is_locked());
}

void ThreadGroup::compute(int rank, void* out) const {
  const Slot& mine = slots_[static_cast<std::size_t>(rank)];
  const CollectiveCall& call = mine.call;
  const std::size_t es = dtype_size(call.dtype);
  const auto bytes = [es](std::int64_t n) { return static_cast<std::size_t>(n) * es; };
  auto* dst = static_cast<unsigned char*>(out);
  auto src = [&](int r) {
    return static_cast<const unsigned char*>(slots_[static_cast<std::size_t>(r)].send);
  };
  const std::int64_t chunk = call.count / size_;
  switch (call.kind) {
    case CollectiveKind::all_reduce:
      std::memcpy(dst, src(0), bytes(call.count));
      for (int r = 1; r < size_; ++r) reduce_into(dst, src(r), call.count, call.dtype, call.reduce);
      break;
    case CollectiveKind::reduce_scatter:
      std::memcpy(dst, src(0) + bytes(rank * chunk), bytes(chunk));
      for (int r = 1; r < size_; ++r) {
        reduce_into(dst, src(r) + bytes(rank * chunk), chunk, call.dtype, call.reduce);
      }
      break;
    case CollectiveKind::all_gather:
      for (int r = 0; r < size_; ++r)
        std::memcpy(dst + bytes(r * call.count), src(r), bytes(call.count));
      break;
    case CollectiveKind::all_to_all:
      for (int r = 0; r < size_; ++r) {
        std::memcpy(dst + bytes(r * chunk), src(r) + bytes(rank * chunk), bytes(chunk));
      }
      break;
    case CollectiveKind::broadcast:
      std::memcpy(dst, src(call.root), bytes(call.count));
      break;
    case CollectiveKind::barrier:
      break;
  }
}

std::size_t output_elements(const CollectiveCall& call, int size) {
  switch (call.kind) {
    case CollectiveKind::all_gather:
      return static_cast<std::size_t>(call.count) * size;
    case CollectiveKind::reduce_scatter:
      return static_cast<std::size_t>(call.count / size);
    case CollectiveKind::barrier:
      return 0;
    default:
      return static_cast<std::size_t>(call.count);
  }
}

void ThreadGroup::run(int rank, const CollectiveCall& call, const void* send, void* recv) {
  validate_call(call, size_, rank);
  const auto u = static_cast<std::size_t>(rank);
  // An in-place call (recv == send) computes into a copy: peers may still read this send buffer.
  // Allocated before arriving, so nothing between arriving and departing can throw.
  const std::size_t out_bytes = output_elements(call, size_) * dtype_size(call.dtype);
  std::vector<unsigned char> staging(recv == send ? out_bytes : 0);
  std::string description = call.str();
  std::unique_lock<std::mutex> lock(mutex_);
  throw_if_failed_locked();
  slots_[u] = Slot{call, send, recv, true};
  const std::uint64_t round = round_;
  if (++arrived_ == size_) {
    const std::string mismatch = mismatch_locked();
    if (!mismatch.empty()) fail_locked(mismatch);
    computing_ = true;
    cv_.notify_all();
  } else {
    wait_locked(
        lock, [&] { return computing_ && round_ == round; }, "waiting for the other ranks");
  }
  // Woken by a failure before the calls matched: leave. Past that point, finish the round.
  if (!(computing_ && round_ == round)) throw_if_failed_locked();
  lock.unlock();
  compute(rank, recv == send ? static_cast<void*>(staging.data()) : recv);
  lock.lock();
  last_[u] = std::move(description);
  if (++departed_ == size_) {
    arrived_ = departed_ = 0;
    computing_ = false;
    for (Slot& s : slots_) s.present = false;
    ++round_;
    cv_.notify_all();
  } else {
    // Unbounded but never stuck: every rank of this round is computing, which cannot block.
    cv_.wait(lock, [&] { return round_ != round; });
  }
  lock.unlock();
  if (!staging.empty()) std::memcpy(recv, staging.data(), staging.size());
}

void ThreadGroup::abort(int rank, const std::string& reason) {
  fail_all("rank " + std::to_string(rank) + " failed: " + reason);
}

void ThreadGroup::fail_all(const std::string& message) {
  std::vector<std::shared_ptr<ThreadGroup>> children;
  std::string failure;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_.empty()) failure_ = message;
    failure = failure_;
    cv_.notify_all();
    for (const auto& entry : subgroups_) children.push_back(entry.second);
  }
  for (const auto& child : children)
    child->fail_all("the group it was split from failed: " + failure);
}

std::shared_ptr<ThreadGroup> ThreadGroup::subgroup(std::uint64_t split, int color, int size) {
  std::shared_ptr<ThreadGroup> g;
  std::string failure;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::shared_ptr<ThreadGroup>& slot = subgroups_[{split, color}];
    if (!slot) slot = std::make_shared<ThreadGroup>(size, timeout_);
    g = slot;
    failure = failure_;
  }
  // Failed between the split's all_gather and here: fail_all may have missed the new group.
  if (!failure.empty()) g->fail_all("the group it was split from failed: " + failure);
  return g;
}

class ThreadComm final : public Communicator {
 public:
  ThreadComm(std::shared_ptr<ThreadGroup> group, int rank)
      : group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  const char* backend_name() const override { return "threads"; }
  void run(const CollectiveCall& call, const void* send, void* recv) override {
    group_->run(rank_, call, send, recv);
  }
  void abort(const std::string& reason) override { group_->abort(rank_, reason); }
  void send(const void* data, std::size_t bytes, int peer) override {
    group_->send(rank_, peer, data, bytes);
  }
  void recv(void* data, std::size_t bytes, int peer) override {
    group_->recv(rank_, peer, data, bytes);
  }
  std::unique_ptr<Communicator> split(int color, int key) override;

 private:
  std::shared_ptr<ThreadGroup> group_;
  int rank_;
  std::uint64_t splits_ = 0;
};

std::unique_ptr<Communicator> ThreadComm::split(int color, int key) {
  const int n = size();
  std::vector<double> mine{static_cast<double>(color), static_cast<double>(key)};
  std::vector<double> all(2 * static_cast<std::size_t>(n));
  CollectiveCall call;
  call.kind = CollectiveKind::all_gather;
  call.count = 2;
  call.dtype = DType::f64;
  call.site.op = "split";
  run(call, mine.data(), all.data());
  // Members of my color ordered by (key, old rank); my new rank is my place in that order.
  std::vector<std::pair<double, int>> members;
  for (int r = 0; r < n; ++r) {
    if (all[2 * static_cast<std::size_t>(r)] == color)
      members.emplace_back(all[2 * static_cast<std::size_t>(r) + 1], r);
  }
  std::sort(members.begin(), members.end());
  int new_rank = 0;
  while (members[static_cast<std::size_t>(new_rank)].second != rank_) ++new_rank;
  auto group = group_->subgroup(splits_++, color, static_cast<int>(members.size()));
  return std::make_unique<ThreadComm>(std::move(group), new_rank);
}

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_thread_comms(int size,
                                                             const ThreadCommOptions& options) {
  if (size < 1)
    throw ArgumentError("a thread group needs at least one rank, given " + std::to_string(size));
  auto group = std::make_shared<ThreadGroup>(size, options.timeout);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < size; ++r) comms.push_back(std::make_unique<ThreadComm>(group, r));
  return comms;
}

}  // namespace shardscope
