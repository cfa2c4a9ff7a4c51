// Tests of HostStagingComm (ranks whose buffers belong to a backend, collectives staged through
// host memory) on the CPU backend, where the staging copies are memcpys: every collective, in place
// and not, a split group and point-to-point give exactly what ThreadComm gives unstaged; the layer
// in every mode runs over it with the same losses and check, bit for bit; a collective before
// attach is an error; and the rank placement of backend cuda with ranks as threads. The cuda runs
// themselves are the cuda instances of tests/parallel/parallel_layer_test.cpp (label gpu).
#include "parallel/comm/host_staging_comm.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "autograd/context.h"
#include "autograd/tensor.h"
#include "parallel/comm/process_group.h"
#include "parallel/comm/spmd_launch.h"
#include "parallel/comm/thread_comm.h"
#include "parallel/run/layer_run.h"

namespace shardscope {
namespace {

using namespace std::chrono_literals;
using Results = std::map<std::string, std::vector<double>>;

SpmdOptions bounded() {
  SpmdOptions options;
  options.timeout = 5000ms;
  return options;
}

// Runs `fn` on `world` threads over ThreadComm, each communicator wrapped in HostStagingComm when
// `staged`, every rank's Context on the CPU.
void run_ranks(int world, bool staged, const RankFn& fn) {
  std::vector<std::unique_ptr<Communicator>> comms = make_thread_comms(world);
  if (staged) {
    for (auto& comm : comms) comm = make_host_staging_comm(std::move(comm));
  }
  run_thread_ranks(comms, std::vector<Device>(static_cast<std::size_t>(world)), fn, bounded());
}

Tensor rank_tensor(Context& ctx, int rank, Shape shape, DType dtype) {
  std::vector<double> v(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = rank * 1000.0 + static_cast<double>(i) * 0.5;
  return Tensor::from_vector(ctx, std::move(shape), v, dtype);
}

// Every collective once, in place where the group's collective is in place, a split group's
// all_reduce, and a ring of point-to-point messages: what each rank got, by name.
std::vector<Results> every_collective(int world, bool staged, DType dtype) {
  std::vector<Results> got(static_cast<std::size_t>(world));
  std::mutex mutex;
  run_ranks(world, staged, [&](RankEnv& env) {
    const int r = env.rank;
    Results mine;
    Tensor sum = rank_tensor(env.ctx, r, {4, 3}, dtype);
    env.group.all_reduce(sum, ReduceOp::sum);
    mine["all_reduce"] = sum.to_vector();
    Tensor max = rank_tensor(env.ctx, (r * 7) % world, {4, 3}, dtype);
    env.group.all_reduce(max, ReduceOp::max);
    mine["all_reduce_max"] = max.to_vector();
    mine["all_gather"] = env.group.all_gather(rank_tensor(env.ctx, r, {2, 3}, dtype)).to_vector();
    const Tensor full = rank_tensor(env.ctx, r, {2 * world, 3}, dtype);
    mine["reduce_scatter"] = env.group.reduce_scatter(full).to_vector();
    mine["all_to_all"] = env.group.all_to_all(full).to_vector();
    Tensor root = rank_tensor(env.ctx, r, {5}, dtype);
    env.group.broadcast(root, world - 1);
    mine["broadcast"] = root.to_vector();
    env.group.barrier();
    std::unique_ptr<Communicator> half = env.comm.split(r % 2, r);
    ProcessGroup sub(env.ctx, *half);
    Tensor part = rank_tensor(env.ctx, r, {3}, dtype);
    sub.all_reduce(part, ReduceOp::sum);
    mine["split_all_reduce"] = part.to_vector();
    const Tensor message = rank_tensor(env.ctx, r, {6}, dtype);
    Tensor received = Tensor::zeros(env.ctx, {6}, dtype);
    env.comm.send(message.raw_data(), message.bytes(), (r + 1) % world);
    env.comm.recv(received.raw_data(), received.bytes(), (r + world - 1) % world);
    mine["ring"] = received.to_vector();
    std::lock_guard<std::mutex> lock(mutex);
    got[static_cast<std::size_t>(r)] = std::move(mine);
  });
  return got;
}

TEST(HostStagingComm, EveryCollectiveGivesWhatThreadCommGivesUnstaged) {
  for (int world : {1, 2, 3, 4}) {
    for (DType dtype : {DType::f32, DType::f64}) {
      const std::vector<Results> plain = every_collective(world, false, dtype);
      const std::vector<Results> staged = every_collective(world, true, dtype);
      for (int r = 0; r < world; ++r) {
        const Results& want = plain[static_cast<std::size_t>(r)];
        const Results& have = staged[static_cast<std::size_t>(r)];
        ASSERT_EQ(have.size(), want.size());
        for (const auto& [name, values] : want) {
          EXPECT_EQ(have.at(name), values)
              << name << " on rank " << r << " of " << world << ", " << dtype_name(dtype);
        }
      }
    }
  }
}

TEST(HostStagingComm, ACollectiveBeforeAttachIsAStateError) {
  std::vector<std::unique_ptr<Communicator>> comms = make_thread_comms(1);
  std::unique_ptr<Communicator> staged = make_host_staging_comm(std::move(comms[0]));
  CollectiveCall call;
  call.kind = CollectiveKind::all_reduce;
  call.count = 1;
  float x = 1;
  try {
    staged->run(call, &x, &x);
    FAIL() << "no error";
  } catch (const StateError& e) {
    EXPECT_NE(std::string(e.what()).find("before attach"), std::string::npos) << e.what();
  }
}

// The layer over staged collectives is the layer over ThreadComm: the same losses, check errors
// and communication log, bit for bit, in every mode.
TEST(HostStagingComm, TheLayerRunsOverItBitForBitInEveryMode) {
  for (ParallelMode mode : {ParallelMode::tp, ParallelMode::tp_sp, ParallelMode::ulysses}) {
    LayerRunSpec spec;
    spec.layer.seq = 8;
    spec.layer.batch = 2;
    spec.layer.hidden = 16;
    spec.layer.heads = 4;
    spec.layer.dropout = 0.1;
    spec.layer.mode = mode;
    spec.layer.degree = 2;
    spec.steps = 2;
    std::vector<RankRun> runs[2];
    for (bool staged : {false, true}) {
      std::vector<RankRun>& out = runs[staged];
      out.resize(2);
      std::mutex mutex;
      run_ranks(2, staged, [&](RankEnv& env) {
        RankRun run = run_layer_rank(env, spec);
        std::lock_guard<std::mutex> lock(mutex);
        out[static_cast<std::size_t>(env.rank)] = std::move(run);
      });
    }
    const std::string what = mode_name(mode);
    ASSERT_TRUE(runs[1][0].check.ran) << what;
    ASSERT_EQ(runs[1][0].check.tensors.size(), runs[0][0].check.tensors.size()) << what;
    for (std::size_t i = 0; i < runs[0][0].check.tensors.size(); ++i) {
      const TensorCheck& want = runs[0][0].check.tensors[i];
      const TensorCheck& have = runs[1][0].check.tensors[i];
      EXPECT_TRUE(have.passed) << what << ": " << have.name;
      EXPECT_EQ(have.max_rel_err, want.max_rel_err) << what << ": " << have.name;
    }
    for (std::size_t r = 0; r < 2; ++r) {
      ASSERT_EQ(runs[1][r].steps.size(), runs[0][r].steps.size()) << what;
      for (std::size_t s = 0; s < runs[0][r].steps.size(); ++s) {
        EXPECT_EQ(runs[1][r].steps[s].loss, runs[0][r].steps[s].loss) << what << " step " << s;
      }
      EXPECT_EQ(runs[1][r].comm.size(), runs[0][r].comm.size()) << what;
    }
  }
}

TEST(ThreadRankDevices, CudaRanksShareTheVisibleDevicesRoundRobin) {
  EXPECT_EQ(thread_rank_devices(3, DeviceKind::cpu, 0), std::vector<Device>(3, Device::cpu()));
  EXPECT_EQ(thread_rank_devices(3, DeviceKind::reference, 0),
            std::vector<Device>(3, Device::reference()));
  EXPECT_EQ(thread_rank_devices(4, DeviceKind::cuda, 1), std::vector<Device>(4, Device::cuda(0)));
  EXPECT_EQ(
      thread_rank_devices(4, DeviceKind::cuda, 2),
      (std::vector<Device>{Device::cuda(0), Device::cuda(1), Device::cuda(0), Device::cuda(1)}));
  EXPECT_EQ(thread_rank_devices(2, DeviceKind::cuda, 8),
            (std::vector<Device>{Device::cuda(0), Device::cuda(1)}));
  try {
    thread_rank_devices(2, DeviceKind::cuda, 0, "cudaGetDeviceCount: no driver");
    FAIL() << "no error";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("needs 1 CUDA device, found 0 (cudaGetDeviceCount: no "
                                         "driver)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace shardscope
