#include "loom/audit/audit_log.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sodium.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <exception>
#include <vector>

#include "loom/audit/audit_chain.hpp"
#include "loom/comm/agreement.hpp"
#include "loom/core/error.hpp"
#include "loom/io/files.hpp"
#include "src/core/unique_fd.hpp"

namespace loom::audit {

namespace {

using nlohmann::ordered_json;

void require_plain_fields(const nlohmann::json& fields, const std::string& event, const crypt::SecretKey* key) {
  require(fields.is_object(), "audit record '", event, "': the fields must be a JSON object, got ",
          fields.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  for (const auto& [name, value] : fields.items()) {
    require(!is_reserved_field(name), "audit record '", event, "': field '", name,
            "' is reserved (seq, time, rank, event, prev, hash are the log's own)");
  }
  // "keyed" and "key_id" say how the log is keyed (the writer stamps them): only the truth passes.
  const bool keyed = key != nullptr;
  require(!fields.contains("keyed") || fields["keyed"] == keyed, "audit record '", event, "': field 'keyed' is ",
          fields.contains("keyed") ? fields["keyed"].dump() : "", " but the log is ", keyed ? "keyed" : "not keyed",
          " (the writer sets it; leave it out)");
  require(!fields.contains("key_id") || (keyed && fields["key_id"] == key->id_hex()), "audit record '", event,
          "': field 'key_id' is not the log's key id (", keyed ? key->id_hex() : std::string("the log is not keyed"),
          "; the writer sets it; leave it out)");
}

}  // namespace

struct AuditLog::State {
  std::string path;
  comm::Communicator* comm = nullptr;
  std::shared_ptr<const crypt::SecretKey> key;
  detail::Fd fd;                       // rank 0's: read, verified, then appended to
  std::int64_t seq = 0;
  std::string prev;
  off_t size = 0;                      // the file's bytes up to the last whole record written
  bool open_line = false;              // the file's last record lacks its newline (an editor's save)
  nlohmann::json pending = nlohmann::json::array();  // the other ranks' records until exchange()

  bool writer() const { return comm == nullptr || comm->rank() == 0; }

  // One descriptor reads, verifies and then appends: the file verified is the file written (no
  // second open by name that a rename or a link could redirect in between).
  void open() {
    // O_NONBLOCK: a FIFO at the path must not hang the job; for a regular file it does nothing.
    fd = detail::Fd(::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK,
                           io::private_file_mode()));
    if (fd.get() < 0) {
      const int error = errno;
      require(error != ELOOP, "audit log '", path, "' is a symbolic link; give the log file itself");
      fail(ErrorCategory::io, "cannot open the audit log '", path, "': ", std::strerror(error));
    }
    struct stat info {};
    if (::fstat(fd.get(), &info) != 0) fail(ErrorCategory::io, "cannot stat the audit log '", path, "': ", std::strerror(errno));
    require(S_ISREG(info.st_mode), "audit log '", path, "' is not a regular file");
    // Two runs appending to one log at once would fork its chain. A filesystem without locks
    // (ENOLCK, EOPNOTSUPP: some network mounts) goes on unlocked rather than stopping the job.
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
      fail(ErrorCategory::invalid_argument, "audit log '", path,
           "' is being written by another process: two runs cannot append to one log at once");
    }
    const crypt::SecretKey* k = key.get();
    const std::string text = read_all();
    open_line = !text.empty() && text.back() != '\n';
    const VerifyResult existing = verify_audit_text(text, k);
    if (!existing.ok()) {
      // Nothing has been written: a log that does not verify is left exactly as it was.
      if (existing.problem->kind == Finding::Kind::key) {
        fail(ErrorCategory::invalid_argument, "audit log '", path, "' cannot be continued by this run (",
             k != nullptr ? std::string("keyed, key id ").append(k->id_hex()) : std::string("no key"), "): ",
             existing.problem->message,
             "; a log keeps the keying of its first record (use another file)");
      }
      fail(ErrorCategory::corrupt_data, "audit log '", path, "' does not verify, so nothing is appended to it: ",
           existing.problem->message);
    }
    seq = existing.last_seq + 1;
    prev = existing.last_hash;
    if (::fchmod(fd.get(), io::private_file_mode()) != 0) {
      fail(ErrorCategory::io, "cannot make the audit log '", path, "' owner-only: ", std::strerror(errno));
    }
  }

  std::string read_all() {
    std::string text;
    std::array<char, 1 << 16> block{};
    for (off_t at = 0;;) {
      const ssize_t n = ::pread(fd.get(), block.data(), block.size(), at);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail(ErrorCategory::io, "cannot read the audit log '", path, "': ", std::strerror(errno));
      if (n == 0) break;
      text.append(block.data(), static_cast<std::size_t>(n));
      at += n;
    }
    size = static_cast<off_t>(text.size());
    return text;
  }

  // The records that say how the log is keyed (the file's first, each run's start) carry it from
  // the writer's own key, so a caller cannot forget it (record() refuses other values).
  void stamp_keying(ordered_json& record, const std::string& event) const {
    if (seq != 0 && event != "run_start") return;
    record["keyed"] = key != nullptr;
    if (key != nullptr) record["key_id"] = key->id_hex();
  }

  void write(int rank, const std::string& time, const std::string& event, const nlohmann::json& fields) {
    ordered_json record;
    record["seq"] = seq;
    record["time"] = time;
    record["rank"] = rank;
    record["event"] = event;
    for (const auto& [name, value] : fields.items()) record[name] = value;
    stamp_keying(record, event);
    record["prev"] = prev;
    // Text that is not UTF-8 (a file name's stray byte) becomes U+FFFD rather than stopping the
    // run: JSON cannot hold it, and the record of the event matters more than the byte.
    std::string body = record.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
    body.pop_back();  // the closing brace: the hash member goes last
    const std::string hash = record_hash(body, key.get());
    // A last record without its newline (verified whole) gets one first, or the two would join.
    std::string line = open_line ? "\n" : "";
    line.append(body).append(",\"hash\":\"").append(hash).append("\"}\n");
    // One write per record: with O_APPEND a record is never interleaved with another's bytes.
    const ssize_t n = ::write(fd.get(), line.data(), line.size());
    if (n != static_cast<ssize_t>(line.size())) {
      const int error = errno;
      // A part of a line (a full disk) would make the log fail verification from here on, and
      // every later run refuse it: cut it off, so the log ends at its last whole record.
      if (n > 0 && ::ftruncate(fd.get(), size) != 0) {
        fail(ErrorCategory::io, "cannot append to the audit log '", path, "' (a short write), nor cut the part "
             "written off (", std::strerror(errno), "): its last line is incomplete");
      }
      fail(ErrorCategory::io, "cannot append to the audit log '", path, "': ",
           n < 0 ? std::strerror(error) : "a short write (the disk may be full); the part written was cut off");
    }
    size += static_cast<off_t>(line.size());
    open_line = false;
    ++seq;
    prev = hash;
    if (event == "run_end" || event.starts_with("checkpoint") || event == "stop") sync();
  }

  void sync() {
    if (fd.get() >= 0 && ::fsync(fd.get()) != 0) {
      fail(ErrorCategory::io, "cannot fsync the audit log '", path, "': ", std::strerror(errno));
    }
  }
};

AuditLog::AuditLog() = default;
AuditLog::~AuditLog() = default;
AuditLog::AuditLog(AuditLog&&) noexcept = default;
AuditLog& AuditLog::operator=(AuditLog&&) noexcept = default;

AuditLog::AuditLog(const std::string& path, comm::Communicator* comm, std::shared_ptr<const crypt::SecretKey> key)
    : state_(std::make_unique<State>()) {
  require(!path.empty(), "audit log: the path is empty");
  state_->path = path;
  state_->comm = comm;
  state_->key = std::move(key);
  std::exception_ptr failure;
  if (state_->writer()) {
    try {
      state_->open();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  if (comm != nullptr) {
    comm::throw_if_any_failed(*comm, failure, "opening the audit log");
  } else if (failure) {
    std::rethrow_exception(failure);
  }
}

void AuditLog::record(const std::string& event, const nlohmann::json& fields) {
  if (!state_) return;
  require(!event.empty(), "audit record: the event name is empty");
  require_plain_fields(fields, event, state_->key.get());
  if (state_->writer()) {
    state_->write(state_->comm != nullptr ? state_->comm->rank() : 0, utc_now(), event, fields);
  } else {
    state_->pending.push_back({{"time", utc_now()}, {"event", event}, {"fields", fields}});
  }
}

void AuditLog::exchange() {
  if (!state_ || state_->comm == nullptr) return;
  const std::vector<std::string> all =
      comm::all_gather_texts(*state_->comm, state_->writer() ? std::string("[]")
                                                             : state_->pending.dump(-1, ' ', false,
                                                                                    nlohmann::json::error_handler_t::replace));
  state_->pending = nlohmann::json::array();
  if (!state_->writer()) return;
  for (std::size_t rank = 1; rank < all.size(); ++rank) {
    for (const nlohmann::json& r : nlohmann::json::parse(all[rank])) {
      state_->write(static_cast<int>(rank), r["time"].get<std::string>(), r["event"].get<std::string>(), r["fields"]);
    }
  }
}

void AuditLog::sync() {
  if (state_ && state_->writer()) state_->sync();
}

const std::string& AuditLog::path() const {
  static const std::string none;
  return state_ ? state_->path : none;
}

std::string file_digest_hex(const std::string& path) {
  crypt::ensure_sodium();
  detail::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail(ErrorCategory::io, "cannot open '", path, "' to digest it: ", std::strerror(errno));
  crypto_generichash_state state;
  crypto_generichash_init(&state, nullptr, 0, 32);
  std::vector<unsigned char> buffer(std::size_t{1} << 20);
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(ErrorCategory::io, "cannot read '", path, "': ", std::strerror(errno));
    if (n == 0) break;
    crypto_generichash_update(&state, buffer.data(), static_cast<unsigned long long>(n));
  }
  std::array<unsigned char, 32> out{};
  crypto_generichash_final(&state, out.data(), out.size());
  return crypt::to_hex(out);
}

std::string current_user() {
  const uid_t uid = ::geteuid();
  std::vector<char> buffer(16384);
  struct passwd entry {};
  struct passwd* found = nullptr;
  if (::getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr) {
    return std::string(found->pw_name) + " (uid " + std::to_string(uid) + ")";
  }
  return "uid " + std::to_string(uid);
}

std::string current_host() {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0) return "unknown";
  return name.data();
}

std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char text[96];  // room for any int, as GCC checks
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<int>(millis));
  return text;
}

}  // namespace loom::audit
