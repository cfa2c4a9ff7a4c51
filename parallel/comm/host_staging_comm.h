// HostStagingComm: lets ranks whose tensors live on a device (the CUDA backend) use a communicator
// that moves host memory (ThreadComm). Each collective copies the rank's send buffer to host
// memory through the rank's backend (which waits for the kernels that wrote it), runs the host
// collective on the copies, and copies the result back to the device buffer. This is how several
// ranks share one GPU: each rank is a thread with its own Context, CUDA backend and stream, and
// their collectives meet in ThreadComm. The cost per collective is a device-to-host copy of the
// send buffer and a host-to-device copy of the result, on top of the host collective
// (docs/cuda.md measures it). NcclComm stays the communicator where every rank has a GPU of its
// own.
#pragma once

#include <memory>

#include "parallel/comm/communicator.h"

namespace shardscope {

// Wraps `host`. attach(ctx) selects the backend the buffers belong to (any backend: on the CPU the
// copies are plain memcpys, which the tests use); a collective before attach is a StateError.
// Communicators split from it stage through the same backend.
std::unique_ptr<Communicator> make_host_staging_comm(std::unique_ptr<Communicator> host);

}  // namespace shardscope
