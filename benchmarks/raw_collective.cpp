#include "raw_collective.hpp"

#include "loom/config.hpp"
#include "loom/core/error.hpp"

#if LOOM_WITH_MPI
#include <mpi.h>

#include "loom/core/mpi_check.hpp"
#endif
#if LOOM_WITH_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "loom/core/cuda_check.hpp"
#include "loom/core/nccl_check.hpp"
#endif

namespace loom::bench {

namespace {

#if LOOM_WITH_NCCL
bool mpi_running() {
#if LOOM_WITH_MPI
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
#else
  return false;
#endif
}
#endif

#if LOOM_WITH_MPI
class RawMpi final : public RawCollective {
 public:
  std::string name() const override { return "MPI"; }

  bool run(const std::string& collective, const Tensor& input, const Tensor& output, comm::ReduceOp op) override {
    MPI_Datatype type = MPI_FLOAT;
    if (input.dtype() == DType::i32) type = MPI_INT32_T;
    else if (input.dtype() == DType::i64) type = MPI_INT64_T;
    else if (input.dtype() != DType::f32) return false;
    const MPI_Op mpi_op = op == comm::ReduceOp::max ? MPI_MAX : op == comm::ReduceOp::min ? MPI_MIN : MPI_SUM;
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    // In place as loom defines it (output == input; the rank's block of the larger buffer) runs as
    // MPI's in place (MPI_IN_PLACE; a reduce-scatter's result then lands at the buffer's start).
    const auto* in = static_cast<const unsigned char*>(input.raw_data());
    const auto* out = static_cast<const unsigned char*>(output.raw_data());
    if (collective == "all_reduce") {
      const void* send = in == out ? MPI_IN_PLACE : in;
      check_mpi(MPI_Allreduce(send, output.raw_data(), static_cast<int>(output.numel()), type, mpi_op, MPI_COMM_WORLD),
                "MPI_Allreduce");
    } else if (collective == "reduce_scatter") {
      const bool in_place = out == in + static_cast<std::size_t>(rank) * output.nbytes();
      check_mpi(MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : in, in_place ? input.raw_data() : output.raw_data(),
                                         static_cast<int>(output.numel()), type, mpi_op, MPI_COMM_WORLD),
                "MPI_Reduce_scatter_block");
    } else {
      const bool in_place = in == out + static_cast<std::size_t>(rank) * input.nbytes();
      check_mpi(MPI_Allgather(in_place ? MPI_IN_PLACE : in, static_cast<int>(input.nbytes()), MPI_BYTE,
                              output.raw_data(), static_cast<int>(input.nbytes()), MPI_BYTE, MPI_COMM_WORLD),
                "MPI_Allgather");
    }
    if (op == comm::ReduceOp::avg && collective != "all_gather") {  // MPI has no average: sum, then divide
      float* values = output.data<float>();
      int size = 1;
      MPI_Comm_size(MPI_COMM_WORLD, &size);
      for (std::int64_t i = 0; i < output.numel(); ++i) values[i] /= static_cast<float>(size);
    }
    return true;
  }

  void barrier() override { check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }
};
#endif

#if LOOM_WITH_NCCL
class RawNccl final : public RawCollective {
 public:
  explicit RawNccl(const World& world) : device_(world.device()) {
    check(cudaSetDevice(device_.index()), "cudaSetDevice");
    ncclUniqueId id;
    if (world.rank() == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
#if LOOM_WITH_MPI
    if (world.size() > 1) check_mpi(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
#endif
    check(ncclCommInitRank(&comm_, world.size(), id, world.rank()), "ncclCommInitRank");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check(cudaMalloc(&scratch_, sizeof(float)), "cudaMalloc");
  }
  ~RawNccl() override {
    cudaFree(scratch_);
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "NCCL"; }

  bool run(const std::string& collective, const Tensor& input, const Tensor& output, comm::ReduceOp op) override {
    const ncclDataType_t type = input.dtype() == DType::f16    ? ncclFloat16
                                : input.dtype() == DType::bf16 ? ncclBfloat16
                                : input.dtype() == DType::i32  ? ncclInt32
                                : input.dtype() == DType::i64  ? ncclInt64
                                                               : ncclFloat32;
    const ncclRedOp_t nccl_op = op == comm::ReduceOp::avg   ? ncclAvg
                                : op == comm::ReduceOp::max ? ncclMax
                                : op == comm::ReduceOp::min ? ncclMin
                                                            : ncclSum;
    const auto count = static_cast<std::size_t>(output.numel());
    if (collective == "all_reduce") {
      check(ncclAllReduce(input.raw_data(), output.raw_data(), count, type, nccl_op, comm_, stream_), "ncclAllReduce");
    } else if (collective == "reduce_scatter") {
      check(ncclReduceScatter(input.raw_data(), output.raw_data(), count, type, nccl_op, comm_, stream_),
            "ncclReduceScatter");
    } else {
      check(ncclAllGather(input.raw_data(), output.raw_data(), input.nbytes(), ncclUint8, comm_, stream_),
            "ncclAllGather");
    }
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    return true;
  }

  void barrier() override {
    check(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_), "ncclAllReduce");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

 private:
  Device device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
};
#endif

}  // namespace

std::unique_ptr<RawCollective> make_raw_collective(const World& world) {
  const std::string_view backend = world.comm().backend();
#if LOOM_WITH_MPI
  if (backend == "mpi") return std::make_unique<RawMpi>();
#endif
#if LOOM_WITH_NCCL
  if (backend == "nccl" && (world.size() == 1 || mpi_running())) return std::make_unique<RawNccl>(world);
#endif
  (void)backend;
  return nullptr;
}

}  // namespace loom::bench
