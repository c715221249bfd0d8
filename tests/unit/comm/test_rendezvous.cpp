// The rendezvous that shares an ncclUniqueId without MPI: 1, 2 and 4 ranks as threads over TCP on
// 127.0.0.1 and through a file, with rank 0 starting late; timeouts when a peer never comes;
// world size mismatches, foreign peers and truncated files as corrupt data; bad arguments.
// With a job secret (protocol 2): ranks holding it get the blob; a peer with another secret or
// none is refused and reported while the job completes; a rank with a secret refuses a rank 0
// without one; an answer recorded by a fake rank 0 and replayed is refused.
// Catch2's assertions are not thread-safe, so rank threads only record outcomes and the test
// thread asserts on them.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loom/comm/rendezvous.hpp"
#include "support/tensor_checks.hpp"

using loom::ErrorCategory;
using loom::comm::file_share_blob;
using loom::comm::tcp_share_blob;
using loom::test::IsError;
using namespace std::chrono_literals;
using Blob = std::vector<unsigned char>;

namespace {

const Blob unique_id = [] {  // as large as an ncclUniqueId, no byte zero
  Blob blob(128);
  for (std::size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<unsigned char>(1 + (i * 37) % 255);
  return blob;
}();

// A port that was free a moment ago: bound to port 0, read back, released.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  if (fd >= 0) ::close(fd);
  REQUIRE(ok);
  return ntohs(address.sin_port);
}

class TemporaryDirectory {
 public:
  TemporaryDirectory() {
    std::string pattern = (std::filesystem::temp_directory_path() / "loom-rendezvous-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TemporaryDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

struct Outcome {
  Blob blob;
  std::exception_ptr error;
  std::chrono::steady_clock::duration took{};
};

std::string describe(const std::exception_ptr& error) {
  if (!error) return "no error";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  }
}

// Runs share(rank) for every rank on its own thread; rank 0 starts root_delay after the others.
std::vector<Outcome> run_ranks(int size, const std::function<Blob(int rank)>& share,
                               std::chrono::milliseconds root_delay = 0ms) {
  std::vector<Outcome> outcomes(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      if (rank == 0) std::this_thread::sleep_for(root_delay);
      Outcome& outcome = outcomes[static_cast<std::size_t>(rank)];
      const auto start = std::chrono::steady_clock::now();
      try {
        outcome.blob = share(rank);
      } catch (...) {
        outcome.error = std::current_exception();
      }
      outcome.took = std::chrono::steady_clock::now() - start;
    });
  }
  for (std::thread& thread : threads) thread.join();
  return outcomes;
}

void require_all_got_unique_id(const std::vector<Outcome>& outcomes) {
  for (std::size_t rank = 0; rank < outcomes.size(); ++rank) {
    INFO("rank " << rank << ": " << describe(outcomes[rank].error));
    REQUIRE(!outcomes[rank].error);
    REQUIRE(outcomes[rank].blob == unique_id);
  }
}

bool has_ipv6_loopback() {
  const int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_addr = in6addr_loopback;
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  if (fd >= 0) ::close(fd);
  return ok;
}

std::span<const unsigned char> blob_of(int rank) {
  return rank == 0 ? std::span(unique_id) : std::span<const unsigned char>();
}

}  // namespace

TEST_CASE("rendezvous: every rank gets rank 0's blob over TCP", "[comm][rendezvous]") {
  for (const int size : {1, 2, 4}) {
    for (const auto root_delay : {0ms, 200ms}) {
      INFO(size << " ranks, rank 0 " << root_delay.count() << " ms late");
      const int port = free_port();
      const auto share = [&](int rank) { return tcp_share_blob("127.0.0.1", port, rank, size, blob_of(rank), 10s); };
      require_all_got_unique_id(run_ranks(size, share, root_delay));
    }
  }
}

TEST_CASE("rendezvous: rank 0 is found by name and over IPv6", "[comm][rendezvous]") {
  std::vector<std::string> hosts = {"localhost"};
  if (has_ipv6_loopback()) {
    hosts.push_back("::1");
  } else {
    WARN("no IPv6 loopback on this machine: ::1 not tried");
  }
  for (const std::string& host : hosts) {
    INFO("host " << host);
    const int port = free_port();
    require_all_got_unique_id(
        run_ranks(3, [&](int rank) { return tcp_share_blob(host, port, rank, 3, blob_of(rank), 10s); }));
  }
}

TEST_CASE("rendezvous: every rank gets rank 0's blob through a file", "[comm][rendezvous]") {
  const TemporaryDirectory directory;
  for (const int size : {1, 2, 4}) {
    for (const auto root_delay : {0ms, 200ms}) {
      INFO(size << " ranks, rank 0 " << root_delay.count() << " ms late");
      const std::string path = directory.file("id-" + std::to_string(size) + "-" + std::to_string(root_delay.count()));
      const auto share = [&](int rank) { return file_share_blob(path, rank, size, blob_of(rank), 10s); };
      require_all_got_unique_id(run_ranks(size, share, root_delay));
      REQUIRE((size == 1) == !std::filesystem::exists(path));  // one rank needs no file
    }
  }
}

TEST_CASE("rendezvous: a peer that never comes is a timeout, not a hang", "[comm][rendezvous]") {
  const int port = free_port(), unused_port = free_port();
  const TemporaryDirectory directory;
  const std::string path = directory.file("never-written");
  const std::vector<Outcome> outcomes = run_ranks(4, [&](int rank) -> Blob {
    switch (rank) {
      case 0: return tcp_share_blob("127.0.0.1", port, 0, 2, unique_id, 300ms);  // rank 1 never connects
      case 1: return tcp_share_blob("127.0.0.1", unused_port, 1, 2, {}, 300ms);  // nobody listens
      case 2: return file_share_blob(path, 1, 2, {}, 300ms);                     // nobody writes
      default: return file_share_blob(path, 2, 3, {}, 0ms);                      // one look, then give up
    }
  });
  const std::string where[] = {"127.0.0.1:" + std::to_string(port), "127.0.0.1:" + std::to_string(unused_port), path,
                               path};
  const std::string what[] = {"only 0 of the 1 other ranks connected", "no connection to rank 0 (last error: ",
                              "rank 0 did not write the file", "rank 0 did not write the file"};
  const std::string ranks[] = {"[rank 0]", "[rank 1]", "[rank 1]", "[rank 2]"};
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    INFO("case " << i << ": " << describe(outcomes[i].error));
    REQUIRE(outcomes[i].error);
    const std::string after = i == 3 ? "gave up after 0 ms" : "gave up after 300 ms";
    REQUIRE_THROWS_MATCHES(std::rethrow_exception(outcomes[i].error), loom::Error,
                           IsError(ErrorCategory::timeout, {where[i], what[i], ranks[i], after}));
    REQUIRE(outcomes[i].took < 3s);
    if (i != 3) REQUIRE(outcomes[i].took >= 250ms);
  }
}

TEST_CASE("rendezvous: a world size mismatch is corrupt data naming both sizes", "[comm][rendezvous]") {
  SECTION("file") {
    const TemporaryDirectory directory;
    const std::string path = directory.file("id");
    REQUIRE(file_share_blob(path, 0, 2, unique_id, 1s) == unique_id);
    REQUIRE_THROWS_MATCHES(
        file_share_blob(path, 1, 3, {}, 1s), loom::Error,
        IsError(ErrorCategory::corrupt_data, {path, "[rank 1]", "world size mismatch", "says 2", "says 3"}));
  }
  SECTION("TCP: both sides notice") {
    const int port = free_port();
    const std::vector<Outcome> outcomes = run_ranks(2, [&](int rank) {
      return tcp_share_blob("127.0.0.1", port, rank, rank == 0 ? 2 : 3, blob_of(rank), 10s);
    });
    for (const Outcome& outcome : outcomes) {
      INFO(describe(outcome.error));
      REQUIRE(outcome.error);
      REQUIRE_THROWS_MATCHES(std::rethrow_exception(outcome.error), loom::Error,
                             IsError(ErrorCategory::corrupt_data, {"world size mismatch", "says 2", "says 3"}));
    }
  }
}

TEST_CASE("rendezvous: foreign peers and truncated files are corrupt data", "[comm][rendezvous]") {
  const TemporaryDirectory directory;
  const std::string path = directory.file("id");
  SECTION("a file that is not a rendezvous file") {
    std::ofstream(path, std::ios::binary) << "{\"not\": \"a loom rendezvous file\"}";
    REQUIRE_THROWS_MATCHES(file_share_blob(path, 1, 2, {}, 1s), loom::Error,
                           IsError(ErrorCategory::corrupt_data, {path, "wrong magic"}));
  }
  SECTION("a truncated file") {
    REQUIRE(file_share_blob(path, 0, 2, unique_id, 1s) == unique_id);
    std::filesystem::resize_file(path, 16 + 100);
    REQUIRE_THROWS_MATCHES(file_share_blob(path, 1, 2, {}, 1s), loom::Error,
                           IsError(ErrorCategory::corrupt_data, {path, "128 bytes", "holds 100", "truncated"}));
    std::filesystem::resize_file(path, 10);
    REQUIRE_THROWS_MATCHES(file_share_blob(path, 1, 2, {}, 1s), loom::Error,
                           IsError(ErrorCategory::corrupt_data, {path, "holds 10 bytes"}));
  }
  SECTION("two ranks claiming the same rank") {
    const int port = free_port();
    const std::vector<Outcome> outcomes = run_ranks(3, [&](int rank) {
      return tcp_share_blob("127.0.0.1", port, rank == 0 ? 0 : 1, 3, blob_of(rank), 2s);
    });
    INFO(describe(outcomes[0].error));
    REQUIRE(outcomes[0].error);
    REQUIRE_THROWS_MATCHES(std::rethrow_exception(outcomes[0].error), loom::Error,
                           IsError(ErrorCategory::corrupt_data, {"[rank 0]", "claims rank 1", "already connected"}));
  }
}

TEST_CASE("rendezvous: bad arguments", "[comm][rendezvous]") {
  const auto tcp = [](const std::string& host, int port, int rank, int size, const Blob& blob) {
    return tcp_share_blob(host, port, rank, size, blob, 100ms);
  };
  const auto invalid = [](std::initializer_list<std::string> fragments) {
    return IsError(ErrorCategory::invalid_argument, fragments);
  };
  REQUIRE_THROWS_MATCHES(tcp("node7", 29500, 4, 4, {}), loom::Error, invalid({"node7:29500", "rank 4", "outside"}));
  REQUIRE_THROWS_MATCHES(tcp("node7", 29500, -1, 4, {}), loom::Error, invalid({"rank -1", "outside"}));
  REQUIRE_THROWS_MATCHES(tcp("node7", 29500, 0, 0, unique_id), loom::Error, invalid({"world size must be at least 1"}));
  REQUIRE_THROWS_MATCHES(tcp("node7", 0, 1, 2, {}), loom::Error, invalid({"node7:0", "port is outside 1..65535"}));
  REQUIRE_THROWS_MATCHES(tcp("node7", 65536, 1, 2, {}), loom::Error, invalid({"port is outside 1..65535"}));
  REQUIRE_THROWS_MATCHES(tcp("", 29500, 1, 2, {}), loom::Error, invalid({"host is empty", "rank 1"}));
  REQUIRE_THROWS_MATCHES(tcp("::1", 29500, 0, 2, {}), loom::Error, invalid({"[::1]:29500", "rank 0", "empty blob"}));
  REQUIRE_THROWS_MATCHES(tcp_share_blob("node7", 29500, 1, 2, {}, -1ms), loom::Error, invalid({"timeout is negative"}));
  REQUIRE_THROWS_MATCHES(file_share_blob("", 1, 2, {}, 100ms), loom::Error, invalid({"path is empty"}));
  REQUIRE_THROWS_MATCHES(file_share_blob("/tmp/x", 0, 2, {}, 100ms), loom::Error, invalid({"/tmp/x", "empty blob"}));
  const Blob huge(loom::comm::max_rendezvous_blob_bytes + 1, 1);
  REQUIRE_THROWS_MATCHES(file_share_blob("/tmp/x", 0, 2, huge, 100ms), loom::Error, invalid({"larger than"}));
  // One rank needs no rendezvous, so it has no host, port or path to check.
  REQUIRE(tcp("", 0, 0, 1, unique_id) == unique_id);
  REQUIRE(file_share_blob("", 0, 1, unique_id, 0ms) == unique_id);
}

namespace {

using loom::comm::RendezvousOptions;
using loom::comm::RendezvousSecret;

// A blocking connection to 127.0.0.1:port for the tests' hand-made peers (1 s send/receive limits).
struct RawPeer {
  int fd = -1;
  explicit RawPeer(int port) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int attempt = 0; attempt < 200; ++attempt) {  // rank 0 may not listen yet
      if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) break;
      ::close(fd);
      fd = ::socket(AF_INET, SOCK_STREAM, 0);
      std::this_thread::sleep_for(10ms);
    }
    timeval limit{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  }
  ~RawPeer() { ::close(fd); }
  Blob receive(std::size_t n) const {
    Blob bytes(n);
    std::size_t got = 0;
    while (got < n) {
      const ssize_t r = ::recv(fd, bytes.data() + got, n - got, 0);
      if (r <= 0) break;
      got += static_cast<std::size_t>(r);
    }
    bytes.resize(got);
    return bytes;
  }
  void send(const Blob& bytes) const { (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL); }
};

// A listener on 127.0.0.1:port that accepts one connection.
struct RawListener {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  explicit RawListener(int port) {
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(fd, 4) == 0);
  }
  ~RawListener() { ::close(fd); }
};

constexpr const char* token = "0123456789abcdef-the-job";

// What rank 0 reported as refused, from its thread; the job's real rank 1 waits for `count` of them.
struct Refusals {
  std::mutex mutex;
  std::vector<std::string> seen;
  std::atomic<int> count{0};
  std::function<void(const std::string&)> callback() {
    return [this](const std::string& why) {
      const std::lock_guard lock(mutex);
      seen.push_back(why);
      ++count;
    };
  }
  void wait_for(int n) const {
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (count < n && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
  }
};

}  // namespace

TEST_CASE("rendezvous: with a job secret every rank gets rank 0's blob", "[comm][rendezvous][crypt]") {
  const RendezvousSecret secret = RendezvousSecret::from_token(token);
  for (const int size : {2, 4}) {
    const int port = free_port();
    RendezvousOptions options;
    options.secret = &secret;
    require_all_got_unique_id(run_ranks(
        size, [&](int rank) { return tcp_share_blob("127.0.0.1", port, rank, size, blob_of(rank), 10s, options); },
        100ms));
  }
  CHECK_THROWS_WITH(RendezvousSecret::from_token("short"),
                    Catch::Contains("the job token has 5 characters; use at least 16"));
}

TEST_CASE("rendezvous: a peer with another secret or none is refused and reported, and the job completes",
          "[comm][rendezvous][crypt]") {
  const RendezvousSecret secret = RendezvousSecret::from_token(token);
  const RendezvousSecret other = RendezvousSecret::from_token("another-secret-of-16+");
  const int port = free_port();
  Refusals refusals;
  RendezvousOptions options, wrong;
  options.secret = &secret;
  options.on_refused = refusals.callback();
  wrong.secret = &other;
  // Threads 0-1 are the job; 2 claims rank 1 with another secret, 3 with none, both before rank 1.
  const std::vector<Outcome> outcomes = run_ranks(4, [&](int thread) -> Blob {
    switch (thread) {
      case 0: return tcp_share_blob("127.0.0.1", port, 0, 2, unique_id, 10s, options);
      case 1: refusals.wait_for(2); return tcp_share_blob("127.0.0.1", port, 1, 2, {}, 10s, options);
      case 2: return tcp_share_blob("127.0.0.1", port, 1, 2, {}, 10s, wrong);
      default: std::this_thread::sleep_for(100ms); return tcp_share_blob("127.0.0.1", port, 1, 2, {}, 10s);
    }
  });
  require_all_got_unique_id({outcomes[0], outcomes[1]});
  CHECK_THAT(describe(outcomes[2].error), Catch::Contains("rank 0 refused this rank: its job secret") &&
                                              Catch::Contains("differs from rank 0's"));
  CHECK_THAT(describe(outcomes[3].error),
             Catch::Contains("rank 0 requires a job secret and this rank has none: set the same LOOM_JOB_TOKEN"));
  REQUIRE(refusals.seen.size() == 2);
  const std::string both = refusals.seen[0] + " | " + refusals.seen[1];
  CHECK_THAT(both, Catch::Contains("refused a peer from 127.0.0.1: its answer does not hold under the job's secret"));
  CHECK_THAT(both, Catch::Contains("refused a peer from 127.0.0.1: it speaks protocol 1: it has no job secret"));
  // A rank with a secret refuses a rank 0 without one, before taking its blob.
  const int plain_port = free_port();
  const std::vector<Outcome> mixed = run_ranks(2, [&](int rank) -> Blob {
    return rank == 0 ? tcp_share_blob("127.0.0.1", plain_port, 0, 2, unique_id, 2s)
                     : tcp_share_blob("127.0.0.1", plain_port, 1, 2, {}, 2s, options);
  });
  CHECK_THAT(describe(mixed[1].error), Catch::Contains("rank 0 has no job secret but this rank has one"));
}

TEST_CASE("rendezvous: a recorded answer replayed to rank 0 is refused", "[comm][rendezvous][crypt]") {
  const RendezvousSecret secret = RendezvousSecret::from_token(token);
  RendezvousOptions options;
  options.secret = &secret;
  // A fake rank 0 records a real rank's answer to its challenge (header, challenge, tag: 80 bytes).
  const int fake_port = free_port();
  Blob recorded;
  {
    RawListener fake(fake_port);
    std::thread rank([&] {
      try {
        tcp_share_blob("127.0.0.1", fake_port, 1, 2, {}, 2s, options);
      } catch (const loom::Error&) {  // the fake rank 0 hangs up after recording
      }
    });
    const int connection = ::accept(fake.fd, nullptr, nullptr);
    Blob challenge{0x4C, 0x4F, 0x4F, 0x4D, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 0};
    challenge.resize(16 + 32, 7);
    (void)::send(connection, challenge.data(), challenge.size(), MSG_NOSIGNAL);
    recorded.resize(80);
    std::size_t got = 0;
    while (got < recorded.size()) {
      const ssize_t r = ::recv(connection, recorded.data() + got, recorded.size() - got, 0);
      if (r <= 0) break;
      got += static_cast<std::size_t>(r);
    }
    recorded.resize(got);
    ::close(connection);
    rank.join();
  }
  REQUIRE(recorded.size() == 80);
  // The real rank 0 challenges afresh: the replayed answer is refused, the real rank 1 then joins.
  const int port = free_port();
  Refusals refusals;
  options.on_refused = refusals.callback();
  Blob reply_to_replay;
  const std::vector<Outcome> outcomes = run_ranks(3, [&](int thread) -> Blob {
    if (thread == 0) return tcp_share_blob("127.0.0.1", port, 0, 2, unique_id, 10s, options);
    if (thread == 1) {
      refusals.wait_for(1);
      return tcp_share_blob("127.0.0.1", port, 1, 2, {}, 10s, options);
    }
    const RawPeer replayer(port);
    replayer.receive(16 + 32);  // rank 0's fresh challenge
    replayer.send(recorded);
    reply_to_replay = replayer.receive(16);
    return {};
  });
  require_all_got_unique_id({outcomes[0], outcomes[1]});
  REQUIRE(reply_to_replay.size() == 16);
  CHECK(Blob(reply_to_replay.begin() + 12, reply_to_replay.end()) == Blob{0xFF, 0xFF, 0xFF, 0xFF});  // refused
  REQUIRE(refusals.seen.size() == 1);
  CHECK_THAT(refusals.seen[0], Catch::Contains("another secret, or a replayed answer"));
}

TEST_CASE("rendezvous: silent strangers neither delay the job's ranks nor stay past 5 s", "[comm][rendezvous][crypt]") {
  const RendezvousSecret secret = RendezvousSecret::from_token(token);
  RendezvousOptions options;
  options.secret = &secret;
  Refusals refusals;
  options.on_refused = refusals.callback();
  {  // Three strangers connect first and say nothing; rank 1 then joins at once, the job completes.
    const int port = free_port();
    std::vector<std::unique_ptr<RawPeer>> strangers;
    const std::vector<Outcome> outcomes = run_ranks(2, [&](int rank) -> Blob {
      if (rank == 0) return tcp_share_blob("127.0.0.1", port, 0, 2, unique_id, 10s, options);
      for (int i = 0; i < 3; ++i) strangers.push_back(std::make_unique<RawPeer>(port));
      return tcp_share_blob("127.0.0.1", port, 1, 2, {}, 10s, options);
    });
    require_all_got_unique_id(outcomes);
    CHECK(outcomes[0].took < 3s);  // not 3 x 5 s behind the strangers
  }
  {  // A stranger that stays silent is dropped and reported after 5 s; rank 1 comes after that.
    const int port = free_port();
    const std::vector<Outcome> outcomes = run_ranks(3, [&](int thread) -> Blob {
      if (thread == 0) return tcp_share_blob("127.0.0.1", port, 0, 2, unique_id, 20s, options);
      if (thread == 1) {
        refusals.wait_for(1);
        return tcp_share_blob("127.0.0.1", port, 1, 2, {}, 10s, options);
      }
      const RawPeer stranger(port);
      std::this_thread::sleep_for(6s);
      return {};
    });
    require_all_got_unique_id({outcomes[0], outcomes[1]});
    REQUIRE(refusals.seen.size() == 1);
    CHECK_THAT(refusals.seen[0], Catch::Contains("refused a peer from 127.0.0.1: it did not answer the challenge within 5 s"));
    CHECK(outcomes[0].took >= 4900ms);
  }
}

namespace {

// Rank r's blob for the all-gathers: r + 1 bytes of value 10 + r, so that blobs differ in length.
Blob gather_blob(int rank) { return Blob(static_cast<std::size_t>(rank) + 1, static_cast<unsigned char>(10 + rank)); }

// Runs gather(rank) on every rank and checks that each got every rank's blob in rank order. With
// port_taken, a rank that could not listen because the port was taken meanwhile (free_port is a
// moment old, and other tests open connections) sets it and nothing is checked: run it again.
void require_gathered(int size, const std::function<std::vector<Blob>(int rank)>& gather,
                      std::chrono::milliseconds root_delay = 0ms, bool* port_taken = nullptr) {
  std::vector<std::vector<Blob>> got(static_cast<std::size_t>(size));
  const std::vector<Outcome> outcomes = run_ranks(
      size,
      [&](int rank) {
        got[static_cast<std::size_t>(rank)] = gather(rank);
        return Blob{};
      },
      root_delay);
  if (port_taken != nullptr) {
    *port_taken = false;
    for (const Outcome& outcome : outcomes)
      if (outcome.error && describe(outcome.error).find("Address already in use") != std::string::npos) *port_taken = true;
    if (*port_taken) return;
  }
  std::vector<Blob> expected;
  for (int r = 0; r < size; ++r) expected.push_back(gather_blob(r));
  for (int rank = 0; rank < size; ++rank) {
    INFO("rank " << rank << " of " << size << ": " << describe(outcomes[static_cast<std::size_t>(rank)].error));
    REQUIRE(!outcomes[static_cast<std::size_t>(rank)].error);
    REQUIRE(got[static_cast<std::size_t>(rank)] == expected);
  }
}

}  // namespace

TEST_CASE("rendezvous: every rank gets every rank's blob over TCP, with and without a job secret",
          "[comm][rendezvous]") {
  const RendezvousSecret secret = RendezvousSecret::from_token(token);
  for (const bool authenticated : {false, true}) {
    for (const int size : {1, 2, 4}) {
      INFO(size << " ranks, " << (authenticated ? "with" : "without") << " a secret");
      RendezvousOptions options;
      if (authenticated) options.secret = &secret;
      bool port_taken = true;
      for (int attempt = 0; port_taken && attempt < 5; ++attempt) {
        const int port = free_port();
        require_gathered(
            size,
            [&](int rank) {
              return loom::comm::tcp_all_gather_blobs("127.0.0.1", port, rank, size, gather_blob(rank), 10s, options);
            },
            100ms, &port_taken);
      }
      REQUIRE(!port_taken);
    }
  }
}

TEST_CASE("rendezvous: every rank gets every rank's blob through files", "[comm][rendezvous]") {
  const TemporaryDirectory directory;
  const std::string path = directory.file("gather");
  require_gathered(3, [&](int rank) {
    return loom::comm::file_all_gather_blobs(path, rank, 3, gather_blob(rank), 10s);
  });
  CHECK(std::filesystem::exists(path + ".0"));
  CHECK(std::filesystem::exists(path + ".2"));
}

TEST_CASE("rendezvous: a gather whose rank never comes is a timeout naming what is missing", "[comm][rendezvous]") {
  const int port = free_port();
  const TemporaryDirectory directory;
  const std::vector<Outcome> outcomes = run_ranks(2, [&](int rank) -> Blob {
    if (rank == 0) loom::comm::tcp_all_gather_blobs("127.0.0.1", port, 0, 3, gather_blob(0), 300ms);
    else loom::comm::file_all_gather_blobs(directory.file("gather"), 1, 2, gather_blob(1), 300ms);
    return {};
  });
  CHECK_THAT(describe(outcomes[0].error), Catch::Contains("tcp rendezvous with 127.0.0.1:") &&
                                              Catch::Contains("only 0 of the 2 other ranks connected"));
  CHECK_THAT(describe(outcomes[1].error), Catch::Contains("gather.0") &&
                                              Catch::Contains("rank 0 did not write the file"));
  CHECK_THROWS_WITH(loom::comm::tcp_all_gather_blobs("127.0.0.1", port, 0, 2, {}, 1s),
                    Catch::Contains("this rank has an empty blob to share"));
}
