// src/comm/mpi/collectives.hpp under mpirun (2, 3 and 4 ranks): every algorithm, forced, on
// exact crafted values (rank r's element i is (r + 1)(i % 5 + 1)), in place and not, with counts
// that do not divide by the rank count, empty ones, and messages large enough to be segmented;
// random floats give the same bits on every rank.
#include <catch2/catch.hpp>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "loom/comm/backend/call_queue.hpp"
#include "loom/core/mpi_check.hpp"
#include "src/comm/mpi/collectives.hpp"
#include "src/comm/mpi/status.hpp"
#include "src/comm/mpi/transfers.hpp"

using loom::DType;
using loom::comm::ReduceOp;
using namespace loom::comm::detail;

namespace {

// What the algorithms need around them, as the MPI communicator sets it up.
struct Peers {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  loom::comm::backend::CallQueue queue{"MPI collectives test", std::chrono::milliseconds(0), true};
  std::unique_ptr<MpiStatus> status;
  std::unique_ptr<MpiTransfers> transfers;
  std::string what = "MPI collectives test";

  Peers() {
    loom::check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    status = std::make_unique<MpiStatus>(comm, rank, size, std::chrono::seconds(60), queue.handle(), what);
    transfers = std::make_unique<MpiTransfers>(*status);
  }
  ~Peers() {
    transfers.reset();
    status.reset();
    MPI_Comm_free(&comm);
  }
  MpiPeers get() { return {comm, rank, size, *transfers, what}; }
};

double value(int rank, std::int64_t i) { return (rank + 1) * static_cast<double>(i % 5 + 1); }

double reduced(ReduceOp op, int size, std::int64_t i) {
  double acc = value(0, i);
  for (int r = 1; r < size; ++r) {
    const double v = value(r, i);
    acc = op == ReduceOp::max ? std::max(acc, v) : op == ReduceOp::min ? std::min(acc, v) : acc + v;
  }
  return acc;
}

template <class T>
std::vector<T> values(int rank, std::int64_t n, std::int64_t first = 0) {
  std::vector<T> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = static_cast<T>(value(rank, first + i));
  return out;
}

// The index of the first element of got that differs from want(i), or -1.
template <class T, class Want>
std::int64_t first_wrong(const std::vector<T>& got, std::int64_t offset, std::int64_t n, Want want) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (static_cast<double>(got[static_cast<std::size_t>(offset + i)]) != want(i)) return i;
  }
  return -1;
}

template <class T>
void check_all_reduce(Peers& p, DType dtype, AllReduceAlgorithm algorithm, std::int64_t n, ReduceOp op) {
  INFO("all_reduce algorithm " << static_cast<int>(algorithm) << ", " << n << " x " << dtype << ", op "
                               << static_cast<int>(op) << ", " << p.size << " ranks");
  const std::vector<T> in = values<T>(p.rank, n);
  std::vector<T> out(static_cast<std::size_t>(n), T{-7});
  all_reduce(p.get(), in.data(), out.data(), n, dtype, op, algorithm);
  CHECK(first_wrong(out, 0, n, [&](std::int64_t i) { return reduced(op, p.size, i); }) == -1);
  std::vector<T> in_place = in;
  all_reduce(p.get(), in_place.data(), in_place.data(), n, dtype, op, algorithm);
  CHECK(in_place == out);
}

template <class T>
void check_reduce_scatter(Peers& p, DType dtype, ScatterGatherAlgorithm algorithm, std::int64_t block, ReduceOp op) {
  INFO("reduce_scatter algorithm " << static_cast<int>(algorithm) << ", blocks of " << block << " x " << dtype
                                   << ", " << p.size << " ranks");
  const std::int64_t n = block * p.size, mine = p.rank * block;
  const std::vector<T> in = values<T>(p.rank, n);
  std::vector<T> out(static_cast<std::size_t>(block), T{-7});
  reduce_scatter(p.get(), in.data(), out.data(), block, dtype, op, algorithm);
  CHECK(first_wrong(out, 0, block, [&](std::int64_t i) { return reduced(op, p.size, mine + i); }) == -1);
  std::vector<T> in_place = in;  // this rank's block of the input is the output
  reduce_scatter(p.get(), in_place.data(), in_place.data() + mine, block, dtype, op, algorithm);
  CHECK(first_wrong(in_place, mine, block, [&](std::int64_t i) { return reduced(op, p.size, mine + i); }) == -1);
  for (int q = 0; q < p.size; ++q) {  // the other blocks are left as they were
    if (q != p.rank) CHECK(first_wrong(in_place, q * block, block, [&](std::int64_t i) { return value(p.rank, q * block + i); }) == -1);
  }
}

void check_all_gather(Peers& p, ScatterGatherAlgorithm algorithm, std::int64_t block) {
  INFO("all_gather algorithm " << static_cast<int>(algorithm) << ", blocks of " << block << " x i32, " << p.size
                               << " ranks");
  const std::int64_t n = block * p.size;
  const auto want = [&](std::int64_t i) { return value(static_cast<int>(i / std::max<std::int64_t>(block, 1)), i % std::max<std::int64_t>(block, 1)); };
  const std::vector<std::int32_t> in = values<std::int32_t>(p.rank, block);
  std::vector<std::int32_t> out(static_cast<std::size_t>(n), -7);
  all_gather(p.get(), in.data(), out.data(), block * 4, algorithm);
  CHECK(first_wrong(out, 0, n, want) == -1);
  std::vector<std::int32_t> in_place(static_cast<std::size_t>(n), -7);
  std::copy(in.begin(), in.end(), in_place.begin() + p.rank * block);
  all_gather(p.get(), in_place.data() + p.rank * block, in_place.data(), block * 4, algorithm);
  CHECK(in_place == out);
}

}  // namespace

TEST_CASE("every MPI all_reduce algorithm gives the exact result on every rank", "[dist][comm][mpi]") {
  Peers p;
  const bool power_of_two = (p.size & (p.size - 1)) == 0;
  for (AllReduceAlgorithm algorithm :
       {AllReduceAlgorithm::exchange, AllReduceAlgorithm::recursive_doubling, AllReduceAlgorithm::ring}) {
    if (algorithm == AllReduceAlgorithm::recursive_doubling && !power_of_two) {
      std::vector<float> x(4);
      REQUIRE_THROWS_WITH(all_reduce(p.get(), x.data(), x.data(), 4, DType::f32, ReduceOp::sum, algorithm),
                          Catch::Contains("recursive doubling needs a power-of-two number of ranks"));
      continue;
    }
    for (std::int64_t n : {0, 1, 7, 1003}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
        check_all_reduce<float>(p, DType::f32, algorithm, n, op);
        check_all_reduce<std::int32_t>(p, DType::i32, algorithm, n, op);
        check_all_reduce<std::int64_t>(p, DType::i64, algorithm, n, op);
      }
    }
  }
  // Blocks of over 4 MiB go around the ring in segments; the count leaves a remainder.
  check_all_reduce<float>(p, DType::f32, AllReduceAlgorithm::ring, p.size * (std::int64_t{1} << 20) + 3,
                          ReduceOp::sum);
}

TEST_CASE("every MPI reduce_scatter and all_gather algorithm gives the exact result", "[dist][comm][mpi]") {
  Peers p;
  for (ScatterGatherAlgorithm algorithm : {ScatterGatherAlgorithm::direct, ScatterGatherAlgorithm::ring}) {
    for (std::int64_t block : {0, 1, 7, 1003}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
        check_reduce_scatter<float>(p, DType::f32, algorithm, block, op);
        check_reduce_scatter<std::int64_t>(p, DType::i64, algorithm, block, op);
      }
      check_all_gather(p, algorithm, block);
    }
    check_reduce_scatter<float>(p, DType::f32, algorithm, (std::int64_t{1} << 20) + 5, ReduceOp::sum);  // segmented
  }
}

TEST_CASE("every MPI broadcast algorithm delivers the root's bytes, and reduce the exact sum, from every root",
          "[dist][comm][mpi]") {
  Peers p;
  for (BroadcastAlgorithm algorithm : {BroadcastAlgorithm::binomial, BroadcastAlgorithm::scatter_all_gather}) {
    for (std::int64_t bytes : {0, 1, 1003, 1 << 20}) {
      for (int root = 0; root < p.size; ++root) {
        INFO("broadcast algorithm " << static_cast<int>(algorithm) << ", " << bytes << " bytes from root " << root);
        std::vector<unsigned char> data(static_cast<std::size_t>(bytes));
        for (std::int64_t i = 0; i < bytes; ++i) {
          data[static_cast<std::size_t>(i)] = p.rank == root ? static_cast<unsigned char>(i * 7 + root) : 0xEE;
        }
        broadcast(p.get(), data.data(), bytes, root, algorithm);
        std::int64_t wrong = 0;
        for (std::int64_t i = 0; i < bytes; ++i) wrong += data[static_cast<std::size_t>(i)] != static_cast<unsigned char>(i * 7 + root);
        CHECK(wrong == 0);
      }
    }
  }
  for (int root = 0; root < p.size; ++root) {
    for (std::int64_t n : {0, 1, 1003}) {
      INFO("reduce of " << n << " to root " << root);
      const std::vector<float> in = values<float>(p.rank, n);
      std::vector<float> out(static_cast<std::size_t>(n), -7.0f);
      reduce(p.get(), in.data(), p.rank == root ? out.data() : nullptr, n, DType::f32, ReduceOp::sum, root);
      if (p.rank == root) CHECK(first_wrong(out, 0, n, [&](std::int64_t i) { return reduced(ReduceOp::sum, p.size, i); }) == -1);
      CHECK(in == values<float>(p.rank, n));  // the input is left as it was
    }
  }
}

TEST_CASE("every MPI all_reduce algorithm gives every rank the same bits of a float sum", "[dist][comm][mpi]") {
  Peers p;
  const std::int64_t n = 40000;
  std::mt19937 rng(static_cast<unsigned>(17 + p.rank));
  std::vector<float> in(static_cast<std::size_t>(n));
  for (float& v : in) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  for (AllReduceAlgorithm algorithm :
       {AllReduceAlgorithm::exchange, AllReduceAlgorithm::recursive_doubling, AllReduceAlgorithm::ring}) {
    if (algorithm == AllReduceAlgorithm::recursive_doubling && (p.size & (p.size - 1)) != 0) continue;  // refused above
    std::vector<float> out(static_cast<std::size_t>(n));
    all_reduce(p.get(), in.data(), out.data(), n, DType::f32, ReduceOp::sum, algorithm);
    std::vector<float> root(static_cast<std::size_t>(n));
    if (p.rank == 0) root = out;
    loom::check_mpi(MPI_Bcast(root.data(), static_cast<int>(n), MPI_FLOAT, 0, MPI_COMM_WORLD), "MPI_Bcast");
    INFO("algorithm " << static_cast<int>(algorithm));
    CHECK(std::memcmp(root.data(), out.data(), root.size() * sizeof(float)) == 0);
  }
}
