#include "src/comm/gloo/collectives.hpp"

#include <gloo/transport/unbound_buffer.h>

#include <cstring>
#include <vector>

#include "loom/core/dtype.hpp"
#include "src/comm/mpi/combine.hpp"
#include "src/comm/mpi/plan.hpp"

namespace loom::comm::detail {

namespace {

// A step's transfers: receives posted first, then sends, then every one waited for. Their buffers
// belong to the link (kept past an aborted call, whose transfers may still be posted).
class Step {
 public:
  Step(const GlooCall& call, int step) : call_(call), slot_(collective_slot(call.collective, step)) {}
  void send(const void* data, std::size_t bytes, int to) {
    if (bytes == 0) return;
    sends_.push_back({&call_.link.buffer(data, bytes), to});
    call_.link.send(*sends_.back().buffer, to, slot_, 0, bytes);
  }
  void recv(void* data, std::size_t bytes, int from) {
    if (bytes == 0) return;
    recvs_.push_back({&call_.link.buffer(data, bytes), from});
    call_.link.recv(*recvs_.back().buffer, from, slot_, 0, bytes);
  }
  void wait() {
    for (auto& r : recvs_) call_.link.wait_recv(*r.buffer, r.peer);
    for (auto& s : sends_) call_.link.wait_send(*s.buffer, s.peer);
  }

 private:
  struct Transfer {
    gloo::transport::UnboundBuffer* buffer;
    int peer;
  };
  const GlooCall& call_;
  std::uint64_t slot_;
  std::vector<Transfer> sends_, recvs_;
};

unsigned char* at(void* base, std::int64_t elements, std::size_t element_bytes) {
  return static_cast<unsigned char*>(base) + static_cast<std::size_t>(elements) * element_bytes;
}
const unsigned char* at(const void* base, std::int64_t elements, std::size_t element_bytes) {
  return static_cast<const unsigned char*>(base) + static_cast<std::size_t>(elements) * element_bytes;
}

int mod(int a, int n) { return ((a % n) + n) % n; }

// Each rank's whole buffer to every other rank; out = op over ranks in rank order.
void direct_all_reduce(const GlooCall& call, const void* in, void* out, std::int64_t count, DType dtype, ReduceOp op) {
  const int n = call.link.size(), me = call.link.rank();
  const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  auto* theirs = static_cast<unsigned char*>(call.scratch.get(call.link, 0, bytes * static_cast<std::size_t>(n)));
  std::vector<const void*> inputs(static_cast<std::size_t>(n));
  Step step(call, 0);
  for (int r = 0; r < n; ++r) {
    inputs[static_cast<std::size_t>(r)] = r == me ? in : theirs + static_cast<std::size_t>(r) * bytes;
    if (r == me) continue;
    step.recv(theirs + static_cast<std::size_t>(r) * bytes, bytes, r);
    step.send(in, bytes, r);
  }
  step.wait();
  combine_in_order(out, inputs, count, dtype, op);
}

// Leaves this rank's block of op over ranks of in in out_block. Block b is combined along the
// ring from rank b + 1 (which sends its own block b) to rank b, each step op(received, mine).
void ring_reduce_scatter(const GlooCall& call, const BlockLayout& layout, const void* in, void* out_block,
                         DType dtype, ReduceOp op, int first_step) {
  const int n = call.link.size(), me = call.link.rank();
  const std::size_t element = dtype_size(dtype);
  const int right = mod(me + 1, n), left = mod(me - 1, n);
  std::int64_t largest = 0;
  for (int b = 0; b < n; ++b) largest = std::max(largest, layout.length(b));
  auto* incoming = call.scratch.get(call.link, 0, static_cast<std::size_t>(largest) * element);
  auto* partial = call.scratch.get(call.link, 1, static_cast<std::size_t>(layout.count) * element);
  for (int s = 0; s < n - 1; ++s) {
    const int sent = mod(me - s - 1, n), received = mod(me - s - 2, n);
    const void* source = s == 0 ? at(in, layout.offset(sent), element) : at(partial, layout.offset(sent), element);
    Step step(call, first_step + s);
    step.recv(incoming, static_cast<std::size_t>(layout.length(received)) * element, left);
    step.send(source, static_cast<std::size_t>(layout.length(sent)) * element, right);
    step.wait();
    void* destination = s == n - 2 ? out_block : at(partial, layout.offset(received), element);
    combine(destination, incoming, at(in, layout.offset(received), element), layout.length(received), dtype, op);
  }
}

// Fills every other block of data from the rank that holds it, passing blocks along the ring.
void ring_all_gather(const GlooCall& call, const BlockLayout& layout, std::size_t element, void* data, int first_step) {
  const int n = call.link.size(), me = call.link.rank();
  const int right = mod(me + 1, n), left = mod(me - 1, n);
  for (int s = 0; s < n - 1; ++s) {
    const int sent = mod(me - s, n), received = mod(me - s - 1, n);
    Step step(call, first_step + s);
    step.recv(at(data, layout.offset(received), element), static_cast<std::size_t>(layout.length(received)) * element,
              left);
    step.send(at(data, layout.offset(sent), element), static_cast<std::size_t>(layout.length(sent)) * element, right);
    step.wait();
  }
}

}  // namespace

void* GlooScratch::get(GlooLink& link, int slot, std::size_t bytes) {
  auto& memory = memory_[slot];
  if (!memory) memory = std::make_shared<std::vector<unsigned char>>();
  if (memory->size() < bytes) memory->resize(bytes);
  link.hold(memory);
  return memory->data();
}

void gloo_all_reduce(const GlooCall& call, const void* in, void* out, std::int64_t count, DType dtype, ReduceOp op) {
  const int n = call.link.size();
  const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  if (n == 1 || count == 0) {
    if (out != in && bytes > 0) std::memcpy(out, in, bytes);
    return;
  }
  // On two ranks the direct exchange moves what the ring does (the buffer, each way) in one step.
  if (n == 2 || bytes * static_cast<std::size_t>(n - 1) <= gloo_direct_all_reduce_bytes || count < n) {
    direct_all_reduce(call, in, out, count, dtype, op);
    return;
  }
  const BlockLayout layout{count, n};
  const std::size_t element = dtype_size(dtype);
  // The reduce-scatter reads only in and writes only this rank's block of out, last; the
  // all-gather then writes the other blocks: in place or not, nothing is read after it is written.
  ring_reduce_scatter(call, layout, in, at(out, layout.offset(call.link.rank()), element), dtype, op, 0);
  ring_all_gather(call, layout, element, out, n);
}

void gloo_reduce_scatter(const GlooCall& call, const void* in, void* out, std::int64_t block, DType dtype,
                         ReduceOp op) {
  const int n = call.link.size(), me = call.link.rank();
  const std::size_t element = dtype_size(dtype), block_bytes = static_cast<std::size_t>(block) * element;
  if (n == 1 || block == 0) {
    if (out != in && block_bytes > 0) std::memcpy(out, in, block_bytes);
    return;
  }
  if (block_bytes * static_cast<std::size_t>(n) > gloo_direct_scatter_gather_bytes) {
    ring_reduce_scatter(call, BlockLayout{block * n, n}, in, out, dtype, op, 0);
    return;
  }
  // Block r of every rank's input to rank r, combined there in rank order.
  auto* theirs = static_cast<unsigned char*>(call.scratch.get(call.link, 0, block_bytes * static_cast<std::size_t>(n)));
  std::vector<const void*> inputs(static_cast<std::size_t>(n));
  Step step(call, 0);
  for (int r = 0; r < n; ++r) {
    inputs[static_cast<std::size_t>(r)] = r == me ? at(in, block * me, element) : theirs + static_cast<std::size_t>(r) * block_bytes;
    if (r == me) continue;
    step.recv(theirs + static_cast<std::size_t>(r) * block_bytes, block_bytes, r);
    step.send(at(in, block * r, element), block_bytes, r);
  }
  step.wait();
  combine_in_order(out, inputs, block, dtype, op);
}

void gloo_all_gather(const GlooCall& call, const void* in, void* out, std::size_t block_bytes) {
  const int n = call.link.size(), me = call.link.rank();
  unsigned char* mine = static_cast<unsigned char*>(out) + static_cast<std::size_t>(me) * block_bytes;
  if (block_bytes > 0 && in != mine) std::memmove(mine, in, block_bytes);
  if (n == 1 || block_bytes == 0) return;
  if (n > 4 && block_bytes * static_cast<std::size_t>(n) > gloo_direct_scatter_gather_bytes) {
    ring_all_gather(call, BlockLayout{static_cast<std::int64_t>(block_bytes) * n, n}, 1, out, 0);
    return;
  }
  Step step(call, 0);
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    step.recv(static_cast<unsigned char*>(out) + static_cast<std::size_t>(r) * block_bytes, block_bytes, r);
    step.send(mine, block_bytes, r);
  }
  step.wait();
}

void gloo_broadcast(const GlooCall& call, void* data, std::size_t bytes, int root) {
  const int n = call.link.size(), me = call.link.rank();
  if (n == 1 || bytes == 0) return;
  Step step(call, 0);
  if (me == root) {
    for (int r = 0; r < n; ++r)
      if (r != root) step.send(data, bytes, r);
  } else {
    step.recv(data, bytes, root);
  }
  step.wait();
}

void gloo_reduce(const GlooCall& call, const void* in, void* out, std::int64_t count, DType dtype, ReduceOp op,
                 int root) {
  const int n = call.link.size(), me = call.link.rank();
  const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  if (count == 0) return;
  if (n == 1) {
    if (out != in) std::memcpy(out, in, bytes);
    return;
  }
  Step step(call, 0);
  if (me != root) {
    step.send(in, bytes, root);
    step.wait();
    return;
  }
  auto* theirs = static_cast<unsigned char*>(call.scratch.get(call.link, 0, bytes * static_cast<std::size_t>(n)));
  std::vector<const void*> inputs(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    inputs[static_cast<std::size_t>(r)] = r == me ? in : theirs + static_cast<std::size_t>(r) * bytes;
    if (r != me) step.recv(theirs + static_cast<std::size_t>(r) * bytes, bytes, r);
  }
  step.wait();
  combine_in_order(out, inputs, count, dtype, op);
}

void gloo_barrier(const GlooCall& call) {
  const int n = call.link.size(), me = call.link.rank();
  if (n == 1) return;
  static const unsigned char token = 1;
  auto* arrived = static_cast<unsigned char*>(call.scratch.get(call.link, 0, static_cast<std::size_t>(n)));
  Step step(call, 0);
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    step.recv(arrived + r, 1, r);
    step.send(&token, 1, r);
  }
  step.wait();
}

}  // namespace loom::comm::detail
