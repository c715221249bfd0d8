#include "src/comm/mpi/gate.hpp"


#include "loom/core/error.hpp"
#include "loom/core/mpi_check.hpp"

namespace loom::comm::detail {

namespace {

constexpr int gate_tag = 201;
constexpr const char* kind_names[] = {"all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter", "barrier",
                                      "split"};

// What a rank knows after a round: its call, and whether every rank heard from so far (itself
// included) makes the same one; if not, one rank that does not and its call.
struct Knowledge {
  std::int64_t index = 0, signature = 0;
  std::int64_t agreed = 1, other_rank = -1, other_index = 0, other_signature = 0;
};
constexpr int knowledge_fields = sizeof(Knowledge) / sizeof(std::int64_t);

std::uint64_t field(std::uint64_t value, int bits) { return value & ((std::uint64_t{1} << bits) - 1); }

}  // namespace

std::int64_t CollectiveSignature::pack() const {
  // -1 (none) is stored as all ones of its field.
  const auto u = [](std::int64_t v, int bits) { return field(static_cast<std::uint64_t>(v), bits); };
  return static_cast<std::int64_t>(u(static_cast<std::int64_t>(kind), 3) | u(op, 3) << 3 | u(dtype, 6) << 6 |
                                   u(root, 20) << 12 | u(count, 32) << 32);
}

CollectiveSignature CollectiveSignature::unpack(std::int64_t packed) {
  const auto bits = static_cast<std::uint64_t>(packed);
  const auto s = [&](int shift, int width) {
    const auto v = static_cast<std::int64_t>(field(bits >> shift, width));
    return v == (std::int64_t{1} << width) - 1 ? std::int64_t{-1} : v;
  };
  CollectiveSignature out;
  out.kind = static_cast<CollectiveKind>(field(bits, 3));
  out.op = static_cast<int>(s(3, 3));
  out.dtype = static_cast<int>(s(6, 6));
  out.root = static_cast<int>(s(12, 20));
  out.count = static_cast<std::int64_t>(field(bits >> 32, 32));
  return out;
}

std::string CollectiveSignature::describe() const {
  const auto index = static_cast<std::size_t>(kind);
  std::string text = index < std::size(kind_names) ? kind_names[index] : "unknown";
  text += "(";
  if (kind != CollectiveKind::barrier && kind != CollectiveKind::split) {
    text += std::to_string(count);
    text += dtype >= 0 ? loom::detail::concat(" x ", static_cast<DType>(dtype)) : std::string(" bytes");
    if (op >= 0) text += ", " + std::string(to_string(static_cast<ReduceOp>(op)));
  }
  if (root >= 0) text += ", root " + std::to_string(root);
  return text + ")";
}

MpiGate::MpiGate(MPI_Comm comm, int rank, int size) : rank_(rank), size_(size) {
  check_mpi(MPI_Comm_dup(comm, &gate_), "MPI_Comm_dup (the arrival gate)");
  check_mpi(MPI_Comm_set_errhandler(gate_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  while ((1 << rounds_) < size_) ++rounds_;
}

MpiGate::~MpiGate() {
  int finalized = 1;
  MPI_Finalized(&finalized);
  if (!finalized && !keep_ && gate_ != MPI_COMM_NULL) MPI_Comm_free(&gate_);
}

struct MpiGate::Buffers {
  std::vector<Knowledge> sent, heard;
  std::vector<MPI_Request> requests;  // round k: receive 2k, send 2k + 1
  explicit Buffers(int rounds)
      : sent(static_cast<std::size_t>(rounds)), heard(static_cast<std::size_t>(rounds)),
        requests(2 * static_cast<std::size_t>(rounds), MPI_REQUEST_NULL) {}
};

void MpiGate::pass(std::int64_t index, const CollectiveSignature& signature, MpiStatus& status,
                   MpiTransfers& transfers, const std::string& what) {
  if (rounds_ == 0) return;
  if (!buffers_) buffers_ = std::make_shared<Buffers>(rounds_);
  const std::shared_ptr<Buffers> b = buffers_;
  transfers.hold(b);
  try {
    run(index, signature, *b, transfers, what);
  } catch (const Error& e) {
    if (e.category() == ErrorCategory::invalid_argument) {  // the ranks disagree on what comes next
      status.abort(e.category(), e.detail());
      throw;
    }
    buffers_.reset();  // the abandoned messages may still use them
    throw;
  }
}

void MpiGate::run(std::int64_t index, const CollectiveSignature& signature, Buffers& buffers, MpiTransfers& transfers,
                  const std::string& what) {
  Buffers* b = &buffers;
  Knowledge known{index, signature.pack()};
  for (int round = 0; round < rounds_; ++round) {
    const int distance = 1 << round;
    const int to = (rank_ + distance) % size_, from = (rank_ - distance + size_) % size_;
    Knowledge& heard = b->heard[static_cast<std::size_t>(round)];
    b->sent[static_cast<std::size_t>(round)] = known;
    MPI_Request& receive = b->requests[static_cast<std::size_t>(2 * round)];
    check_mpi(MPI_Irecv(&heard, knowledge_fields, MPI_INT64_T, from, gate_tag + round, gate_, &receive), what);
    check_mpi(MPI_Isend(&b->sent[static_cast<std::size_t>(round)], knowledge_fields, MPI_INT64_T, to,
                        gate_tag + round, gate_, &b->requests[static_cast<std::size_t>(2 * round + 1)]),
              what);
    transfers.wait_all(std::span<MPI_Request>(&receive, 1), what, b->requests);
    if (!known.agreed) continue;
    if (heard.index != known.index || heard.signature != known.signature) {
      known.agreed = 0;
      known.other_rank = from;
      known.other_index = heard.index;
      known.other_signature = heard.signature;
    } else if (!heard.agreed) {
      known.agreed = 0;
      known.other_rank = heard.other_rank;
      known.other_index = heard.other_index;
      known.other_signature = heard.other_signature;
    }
  }
  transfers.wait_all(b->requests, what);
  if (known.agreed) return;
  fail(ErrorCategory::invalid_argument, what, ": collective mismatch: this rank's collective #", index, " is ",
       signature.describe(), " but rank ", known.other_rank, "'s collective #", known.other_index, " is ",
       CollectiveSignature::unpack(known.other_signature).describe(),
       " (every rank must make the same collectives in the same order; LOOM_DEBUG_COLLECTIVES=1 names every call)");
}

}  // namespace loom::comm::detail
