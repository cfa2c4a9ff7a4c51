// ThreadComm: a rendezvous per collective over shared memory, with checks and timeouts.
#include "parallel/comm/thread_comm.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include "parallel/comm/stream_copy.h"

namespace shardscope {
namespace {

// Where chunk `chunk` of `count` elements split over `size` ranks begins (the chunks of a split
// all_reduce: as even as whole elements allow).
std::int64_t chunk_begin(std::int64_t count, int chunk, int size) {
  return count * chunk / size;
}

// A large all_reduce splits the work among the ranks (a reduce-scatter and an all-gather in one
// pass over shared memory): rank r sums chunk r of every send buffer, block by block, and writes
// each summed block into every rank's output. A rank reads and writes the buffer's size once,
// instead of reading t times its size to sum all of it, with the same sums in the same rank order,
// so the same bits. Chunk r of any buffer is touched by rank r alone, which reads a block of it
// before writing that block: an in-place call needs no staging copy. Below this size the work is
// small and every rank sums it all into its own output.
constexpr std::size_t kSplitAllReduceBytes = std::size_t{64} << 10;

// The state the ranks of one group share. A collective is a round: every rank arrives with its
// call and buffers; the last to arrive checks the calls; each rank then computes its own output
// by reading the others' send buffers (a split all_reduce also writes into their outputs); the
// round ends when every rank has departed, so no buffer is released while a peer may still use
// it, and every output is complete when its rank returns. A failure (abort, timeout) ends a round
// only before its calls matched: once every rank arrived, every rank computes and departs,
// because its peers are using its buffers. A failure reaches the groups split from this one.
class ThreadGroup {
 public:
  ThreadGroup(int size, const ThreadCommOptions& options)
      : size_(size),
        options_(options),
        slots_(static_cast<std::size_t>(size)),
        last_(static_cast<std::size_t>(size), "none") {}

  int size() const { return size_; }
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
    void* out = nullptr;  // recv, or a staging copy when an in-place call needs one
    bool present = false;
  };

  bool split_all_reduce(const CollectiveCall& call) const;
  // Whether a rank writes its output with streaming stores: when the buffer it writes or the one
  // it reduces from is ThreadCommOptions::stream_bytes or more (a reduce_scatter of 16 MiB over 2
  // ranks writes 8 MiB: streamed, 0.75 to 0.78 ms a call; plain, 0.76 to 1.3 ms).
  bool streams(const CollectiveCall& call) const;
  // The collective's work for `rank` (into `out`), adding the bytes it moves to `traffic`.
  void compute(int rank, void* out, CommTraffic& traffic) const;
  // A split all_reduce's share of `rank`: chunk `rank` summed into every rank's output.
  void reduce_own_chunk(int rank, CommTraffic& traffic) const;
  // Bytes [begin, end) of every send buffer reduced in rank order into `out` from byte `out_at`
  // on, or (out null) into every rank's output at the same bytes.
  void reduce_range(const CollectiveCall& call, std::size_t begin, std::size_t end, void* out,
                    std::size_t out_at, CommTraffic& traffic) const;
  std::string mismatch_locked() const;
  std::string where_everyone_is_locked() const;
  [[noreturn]] void fail_locked(const std::string& message);
  void throw_if_failed_locked() const;
  template <class Pred>
  void wait_locked(std::unique_lock<std::mutex>& lock, Pred done, const char* stage);

  const int size_;
  const ThreadCommOptions options_;  // also the options of the groups split from this one
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
      cv_.wait_for(lock, options_.timeout, [&] { return !box.empty() || !failure_.empty(); });
  throw_if_failed_locked();
  if (!arrived) {
    fail_locked("rank " + std::to_string(to) + " waited " +
                std::to_string(options_.timeout.count()) + " ms in recv of " +
                std::to_string(bytes) + " bytes from rank " + std::to_string(from) +
                ", which sent it nothing");
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
  if (cv_.wait_for(lock, options_.timeout, [&] { return done() || !failure_.empty(); })) return;
  fail_locked("collective timed out after " + std::to_string(options_.timeout.count()) + " ms (" +
              stage + "); where every rank is:" + where_everyone_is_locked());
}

void ThreadGroup::compute(int rank, void* out, CommTraffic& traffic) const {
  const Slot& mine = slots_[static_cast<std::size_t>(rank)];
  const CollectiveCall& call = mine.call;
  const std::size_t es = dtype_size(call.dtype);
  const auto bytes = [es](std::int64_t n) { return static_cast<std::size_t>(n) * es; };
  auto* dst = static_cast<unsigned char*>(out);
  auto src = [&](int r) {
    return static_cast<const unsigned char*>(slots_[static_cast<std::size_t>(r)].send);
  };
  const auto copy_fn = streams(call) ? stream_copy : plain_copy;
  auto copy = [&](unsigned char* to, const unsigned char* from, std::size_t n) {
    copy_fn(to, from, n);
    traffic.read += static_cast<double>(n);
    traffic.written += static_cast<double>(n);
  };
  const std::int64_t chunk = call.count / size_;
  switch (call.kind) {
    case CollectiveKind::all_reduce:  // a small one (a large one is split: reduce_own_chunk)
      reduce_range(call, 0, bytes(call.count), dst, 0, traffic);
      break;
    case CollectiveKind::reduce_scatter:
      reduce_range(call, bytes(rank * chunk), bytes((rank + 1) * chunk), dst, 0, traffic);
      break;
    case CollectiveKind::all_gather:
      for (int r = 0; r < size_; ++r) copy(dst + bytes(r * call.count), src(r), bytes(call.count));
      break;
    case CollectiveKind::all_to_all:
      for (int r = 0; r < size_; ++r) {
        copy(dst + bytes(r * chunk), src(r) + bytes(rank * chunk), bytes(chunk));
      }
      break;
    case CollectiveKind::broadcast:
      copy(dst, src(call.root), bytes(call.count));
      break;
    case CollectiveKind::barrier:
      break;
  }
}

// reduce_into (parallel/comm/communicator.cpp) on one whole block of a split all_reduce, the same
// operation element by element: a loop of a count known when compiling over buffers that do not
// overlap (__restrict, a GCC and Clang extension), which the compiler turns into vector
// instructions (reduce_into's loop of any count, over memory that may alias, stays scalar). False
// for a dtype it leaves to reduce_into.
// 2 KiB: a block's copies stay below the size from which glibc 2.36 copies with `rep movsb`,
// which on this project's AMD machine runs some 20 times slower for some distances between
// source and destination (docs/benchmarks.md); the block is still 512 floats.
constexpr std::size_t kBlockBytes = 2048;

template <class T>
void reduce_block_typed(T* __restrict sum, const T* __restrict in, ReduceOp op) {
  constexpr std::size_t n = kBlockBytes / sizeof(T);
  if (op == ReduceOp::sum) {
    for (std::size_t i = 0; i < n; ++i) sum[i] += in[i];
  } else {
    for (std::size_t i = 0; i < n; ++i) sum[i] = std::max(sum[i], in[i]);
  }
}

bool reduce_block(unsigned char* sum, const void* in, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::f32:
      reduce_block_typed(reinterpret_cast<float*>(sum), static_cast<const float*>(in), op);
      return true;
    case DType::f64:
      reduce_block_typed(reinterpret_cast<double*>(sum), static_cast<const double*>(in), op);
      return true;
    case DType::bf16:  // reduce_into computes them in f32
    case DType::f16:
    case DType::u8:
      break;
  }
  return false;
}

bool split_all_reduce_bytes(const CollectiveCall& call, int size) {
  return call.kind == CollectiveKind::all_reduce && size > 1 &&
         static_cast<std::size_t>(call.count) * dtype_size(call.dtype) >= kSplitAllReduceBytes;
}

bool ThreadGroup::streams(const CollectiveCall& call) const {
  return static_cast<std::size_t>(std::max(recv_elements(call, size_), call.count)) *
             dtype_size(call.dtype) >=
         options_.stream_bytes;
}

bool ThreadGroup::split_all_reduce(const CollectiveCall& call) const {
  return split_all_reduce_bytes(call, size_);
}

void ThreadGroup::reduce_own_chunk(int rank, CommTraffic& traffic) const {
  const CollectiveCall& call = slots_[static_cast<std::size_t>(rank)].call;
  const std::size_t es = dtype_size(call.dtype);
  const auto begin = static_cast<std::size_t>(chunk_begin(call.count, rank, size_)) * es;
  const auto end = static_cast<std::size_t>(chunk_begin(call.count, rank + 1, size_)) * es;
  reduce_range(call, begin, end, nullptr, begin, traffic);
}

void ThreadGroup::reduce_range(const CollectiveCall& call, std::size_t begin, std::size_t end,
                               void* out, std::size_t out_at, CommTraffic& traffic) const {
  const std::size_t es = dtype_size(call.dtype);
  const bool stream = streams(call);
  auto copy = stream ? stream_copy_unfenced : plain_copy;
  auto write = [&](std::size_t at, const unsigned char* sum, std::size_t n) {
    const std::size_t to = out_at + (at - begin);
    if (out) {
      copy(static_cast<unsigned char*>(out) + to, sum, n);
      return;
    }
    for (const Slot& slot : slots_) copy(static_cast<unsigned char*>(slot.out) + to, sum, n);
  };
  // Block by block through a buffer that stays in L1: each send buffer's bytes are read once and
  // each output's written once, a block only after it was read everywhere.
  alignas(64) unsigned char sum[kBlockBytes];
  for (std::size_t at = begin; at < end; at += sizeof sum) {
    const std::size_t n = std::min(sizeof sum, end - at);
    std::memcpy(sum, static_cast<const unsigned char*>(slots_[0].send) + at, n);
    for (std::size_t r = 1; r < slots_.size(); ++r) {
      const void* in = static_cast<const unsigned char*>(slots_[r].send) + at;
      if (n == sizeof sum && reduce_block(sum, in, call.dtype, call.reduce)) continue;
      reduce_into(sum, in, static_cast<std::int64_t>(n / es), call.dtype, call.reduce);
    }
    write(at, sum, n);
    traffic.read += static_cast<double>(n * slots_.size());
    traffic.written += static_cast<double>(out ? n : n * slots_.size());
  }
  if (stream) store_fence();
}

void ThreadGroup::run(int rank, const CollectiveCall& call, const void* send, void* recv) {
  validate_call(call, size_, rank);
  const auto u = static_cast<std::size_t>(rank);
  // An in-place call (recv == send) computes into a copy: peers may still read this send buffer.
  // Allocated before arriving, so nothing between arriving and departing can throw. A split
  // all_reduce needs none (see kSplitAllReduceBytes).
  const bool split = split_all_reduce(call);
  const auto out_bytes =
      static_cast<std::size_t>(recv_elements(call, size_)) * dtype_size(call.dtype);
  std::vector<unsigned char> staging(recv == send && !split ? out_bytes : 0);
  void* out = staging.empty() ? recv : static_cast<void*>(staging.data());
  std::string description = call.str();
  std::unique_lock<std::mutex> lock(mutex_);
  throw_if_failed_locked();
  slots_[u] = Slot{call, send, out, true};
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
  CommTraffic traffic;
  if (split) {
    reduce_own_chunk(rank, traffic);
  } else {
    compute(rank, out, traffic);
  }
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
  if (!staging.empty()) {
    std::memcpy(recv, staging.data(), staging.size());
    traffic.read += static_cast<double>(staging.size());
    traffic.written += static_cast<double>(staging.size());
  }
  if (options_.on_traffic) options_.on_traffic(rank, traffic);
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
    if (!slot) slot = std::make_shared<ThreadGroup>(size, options_);
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

CommTraffic thread_comm_traffic(const CollectiveCall& call, int size, int rank, bool in_place) {
  const double es = static_cast<double>(dtype_size(call.dtype));
  const double sent = static_cast<double>(call.count) * es;
  const double out = static_cast<double>(recv_elements(call, size)) * es;
  const double t = size;
  CommTraffic traffic;
  switch (call.kind) {
    case CollectiveKind::all_reduce:
      if (split_all_reduce_bytes(call, size)) {
        const double chunk = static_cast<double>(chunk_begin(call.count, rank + 1, size) -
                                                 chunk_begin(call.count, rank, size)) *
                             es;
        return {t * chunk, t * chunk};  // no staging copy
      }
      traffic = {t * sent, out};
      break;
    case CollectiveKind::reduce_scatter:
      traffic = {sent, out};
      break;
    case CollectiveKind::all_gather:
    case CollectiveKind::all_to_all:
    case CollectiveKind::broadcast:
      traffic = {out, out};
      break;
    case CollectiveKind::barrier:
      break;
  }
  if (in_place) traffic = {traffic.read + out, traffic.written + out};
  return traffic;
}

std::vector<std::unique_ptr<Communicator>> make_thread_comms(int size,
                                                             const ThreadCommOptions& options) {
  if (size < 1)
    throw ArgumentError("a thread group needs at least one rank, given " + std::to_string(size));
  auto group = std::make_shared<ThreadGroup>(size, options);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < size; ++r) comms.push_back(std::make_unique<ThreadComm>(group, r));
  return comms;
}

}  // namespace shardscope
