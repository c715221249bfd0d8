// Tensors exchanged between MPI ranks: crafted contents whose exact value on the receiving rank is
// known, in several dtypes and sizes (0, 1, odd, several MiB). Raw MPI here; the Communicator
// issue builds loom's own collectives on top.
#include <catch2/catch.hpp>
#include <mpi.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "loom/core/mpi_check.hpp"
#include "loom/core/tensor.hpp"
#include "loom/core/tensor_ops.hpp"
#include "support/tensor_checks.hpp"

using loom::DType;
using loom::Tensor;

namespace {

int world_rank() {
  int rank = 0;
  loom::check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
  return rank;
}

int world_size() {
  int size = 0;
  loom::check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
  return size;
}

// What rank `owner` sends: bf16 values (owner + 1) / 2 + (i mod 16), all exact in bf16.
Tensor ring_payload(int owner, std::int64_t n) {
  const Tensor t = Tensor::empty({n}, DType::bf16);
  auto values = t.span<loom::bfloat16>();
  for (std::int64_t i = 0; i < n; ++i) {
    values[static_cast<std::size_t>(i)] = loom::to_bfloat16(static_cast<float>(owner + 1) / 2 + static_cast<float>(i % 16));
  }
  return t;
}

int as_int_count(std::size_t bytes) {
  REQUIRE(bytes <= static_cast<std::size_t>(INT32_MAX));
  return static_cast<int>(bytes);
}

}  // namespace

TEST_CASE("bf16 tensors pass around a ring of ranks intact", "[dist]") {
  const int rank = world_rank(), size = world_size();
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  for (std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{1001}, std::int64_t{3 << 20} + 5}) {
    INFO("rank " << rank << ", " << n << " elements");
    const Tensor outgoing = ring_payload(rank, n);
    const Tensor incoming = Tensor::empty({n}, DType::bf16);
    loom::test::poison(incoming);
    const Tensor out_bytes = outgoing.as_bytes(), in_bytes = incoming.as_bytes();
    loom::check_mpi(MPI_Sendrecv(out_bytes.raw_data(), as_int_count(outgoing.nbytes()), MPI_BYTE, next, 7,
                                 in_bytes.raw_data(), as_int_count(incoming.nbytes()), MPI_BYTE, prev, 7,
                                 MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                    "MPI_Sendrecv");
    const Tensor expected = ring_payload(prev, n);
    REQUIRE(in_bytes.to_vector<std::uint8_t>() == expected.as_bytes().to_vector<std::uint8_t>());
    if (n > 0) CHECK(loom::to_float(incoming.at<loom::bfloat16>({0})) == static_cast<float>(prev + 1) / 2);
  }
}

TEST_CASE("uneven i64 slices of one tensor gather on rank 0 in rank order", "[dist]") {
  const int rank = world_rank(), size = world_size();
  // Rank r owns rows [r(r+1)/2, (r+1)(r+2)/2) of a tensor whose row i holds (i, -i).
  const std::int64_t total_rows = static_cast<std::int64_t>(size) * (size + 1) / 2;
  const std::int64_t first = static_cast<std::int64_t>(rank) * (rank + 1) / 2, rows = rank + 1;
  const Tensor mine = Tensor::empty({rows, 2}, DType::i64);
  for (std::int64_t i = 0; i < rows; ++i) {
    mine.at<std::int64_t>({i, 0}) = first + i;
    mine.at<std::int64_t>({i, 1}) = -(first + i);
  }
  const Tensor all = Tensor::empty({total_rows, 2}, DType::i64);
  loom::test::poison(all);
  std::vector<int> counts(static_cast<std::size_t>(size)), offsets(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    counts[static_cast<std::size_t>(r)] = (r + 1) * 2 * 8;
    offsets[static_cast<std::size_t>(r)] = r * (r + 1) / 2 * 2 * 8;
  }
  loom::check_mpi(MPI_Gatherv(mine.raw_data(), as_int_count(mine.nbytes()), MPI_BYTE, all.raw_data(), counts.data(),
                              offsets.data(), MPI_BYTE, 0, MPI_COMM_WORLD),
                  "MPI_Gatherv");
  if (rank == 0) {
    for (std::int64_t i = 0; i < total_rows; ++i) {
      REQUIRE(all.at<std::int64_t>({i, 0}) == i);
      REQUIRE(all.at<std::int64_t>({i, 1}) == -i);
    }
  }
}

TEST_CASE("an f32 sum over ranks equals the closed form exactly", "[dist]") {
  const int rank = world_rank(), size = world_size();
  const std::int64_t n = 4099;
  const Tensor contribution = Tensor::empty({n}, DType::f32);
  for (std::int64_t i = 0; i < n; ++i) contribution.at<float>({i}) = static_cast<float>((rank + 1) * (i % 97));
  const Tensor sum = Tensor::empty({n}, DType::f32);
  loom::test::poison(sum);
  loom::check_mpi(MPI_Allreduce(contribution.raw_data(), sum.raw_data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                                MPI_COMM_WORLD),
                  "MPI_Allreduce");
  const float ranks_sum = static_cast<float>(size * (size + 1) / 2);
  for (std::int64_t i = 0; i < n; ++i) REQUIRE(sum.at<float>({i}) == ranks_sum * static_cast<float>(i % 97));
}

TEST_CASE("MPI failures become loom errors that carry MPI's words and the rank", "[dist]") {
  const int rank = world_rank();
  int value = 0;
  try {
    loom::check_mpi(MPI_Send(&value, -1, MPI_INT, 0, 0, MPI_COMM_WORLD), "MPI_Send(count=-1)");
    FAIL("a negative count was accepted");
  } catch (const loom::Error& error) {
    CHECK(error.category() == loom::ErrorCategory::mpi);
    CHECK(error.rank() == rank);  // read from mpirun's environment
    const std::string what = error.what();
    CHECK(what.find("MPI_Send(count=-1)") != std::string::npos);
    CHECK(what.find("count") != std::string::npos);
    CHECK(what.find("[rank " + std::to_string(rank) + "]") != std::string::npos);
    CHECK(what.find("not initialized") == std::string::npos);
  }
}
