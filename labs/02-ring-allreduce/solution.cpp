// Lab 2, the instructor's solution: the ring reduce-scatter and all-gather on one buffer of t
// chunks, and the all-reduce as one after the other. It also does the stretch task: N need not
// divide by t (chunk c has N / t elements, one more for the first N % t chunks, as
// numpy.array_split cuts).
#include "labs/02-ring-allreduce/lab.h"

#include <algorithm>
#include <cstddef>

namespace shardscope::labs {
namespace {

// Where the t chunks of a buffer of n_total elements lie.
struct Chunks {
  std::size_t n_total;
  int t;
  std::size_t begin(int c) const {
    const auto u = static_cast<std::size_t>(c);
    const std::size_t base = n_total / static_cast<std::size_t>(t);
    return u * base + std::min(u, n_total % static_cast<std::size_t>(t));
  }
  std::size_t size(int c) const { return begin(c + 1) - begin(c); }
};

int mod(int x, int t) {
  return ((x % t) + t) % t;
}

// In place on rank r's buffer: afterwards chunk r holds the sum over every rank of chunk r (the
// other chunks hold partial sums). At step k rank r passes on chunk (r - k - 1) mod t, which it
// has just summed (or, at k = 0, its own values), and adds the chunk (r - k - 2) mod t that its
// left neighbour passes on. Working back from the last step, k = t - 2, that chunk is r.
void reduce_scatter_in_place(Communicator& comm, std::vector<double>& buf, const Chunks& chunks) {
  const int t = comm.size(), r = comm.rank();
  const int right = mod(r + 1, t), left = mod(r - 1, t);
  std::vector<double> incoming;
  for (int k = 0; k + 1 < t; ++k) {
    const int send_c = mod(r - k - 1, t), recv_c = mod(r - k - 2, t);
    comm.send(buf.data() + chunks.begin(send_c), chunks.size(send_c) * sizeof(double), right);
    incoming.resize(chunks.size(recv_c));
    comm.recv(incoming.data(), incoming.size() * sizeof(double), left);
    double* sums = buf.data() + chunks.begin(recv_c);
    for (std::size_t i = 0; i < incoming.size(); ++i) sums[i] += incoming[i];
  }
}

// In place on rank r's buffer, whose chunk r is complete: afterwards every chunk is. At step k
// rank r passes on the chunk of rank (r - k) mod t (its own at k = 0, then the one it received
// the step before) and receives the chunk of rank (r - k - 1) mod t.
void all_gather_in_place(Communicator& comm, std::vector<double>& buf, const Chunks& chunks) {
  const int t = comm.size(), r = comm.rank();
  const int right = mod(r + 1, t), left = mod(r - 1, t);
  for (int k = 0; k + 1 < t; ++k) {
    const int send_c = mod(r - k, t), recv_c = mod(r - k - 1, t);
    comm.send(buf.data() + chunks.begin(send_c), chunks.size(send_c) * sizeof(double), right);
    comm.recv(buf.data() + chunks.begin(recv_c), chunks.size(recv_c) * sizeof(double), left);
  }
}

}  // namespace

std::vector<double> ring_reduce_scatter(Communicator& comm, const std::vector<double>& input) {
  const Chunks chunks{input.size(), comm.size()};
  std::vector<double> sums = input;
  reduce_scatter_in_place(comm, sums, chunks);
  const auto first = sums.begin() + static_cast<std::ptrdiff_t>(chunks.begin(comm.rank()));
  return {first, first + static_cast<std::ptrdiff_t>(chunks.size(comm.rank()))};
}

std::vector<double> ring_all_gather(Communicator& comm, const std::vector<double>& chunk) {
  const Chunks chunks{chunk.size() * static_cast<std::size_t>(comm.size()), comm.size()};
  std::vector<double> out(chunks.n_total);
  std::copy(chunk.begin(), chunk.end(),
            out.begin() + static_cast<std::ptrdiff_t>(chunks.begin(comm.rank())));
  all_gather_in_place(comm, out, chunks);
  return out;
}

// One buffer through both halves, so that uneven chunks work too (ring_all_gather alone cannot
// know the other ranks' chunk sizes). With N divisible by t this is exactly
// ring_all_gather(comm, ring_reduce_scatter(comm, input)).
std::vector<double> ring_all_reduce(Communicator& comm, const std::vector<double>& input) {
  const Chunks chunks{input.size(), comm.size()};
  std::vector<double> buf = input;
  reduce_scatter_in_place(comm, buf, chunks);
  all_gather_in_place(comm, buf, chunks);
  return buf;
}

}  // namespace shardscope::labs
