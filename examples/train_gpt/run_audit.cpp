#include "run_audit.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "loom/audit/audit_chain.hpp"
#include "loom/core/build_info.hpp"
#include "loom/io/at_rest.hpp"
#include "loom/io/checkpoint.hpp"

namespace train_gpt {

namespace fs = std::filesystem;

namespace {

// BLAKE2b-256 of each file of a checkpoint folder, by name.
nlohmann::json folder_digests(const std::string& dir) {
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  nlohmann::json digests = nlohmann::json::object();
  for (const fs::path& f : files) digests[f.filename().string()] = loom::audit::file_digest_hex(f.string());
  return digests;
}

// Runs what rank 0 alone records: a failure there (a file that cannot be read, a full disk) is
// said on stderr and the run goes on, so rank 0 never leaves the others waiting in a collective.
template <class F>
void rank_zero_only(const char* what, F&& f) noexcept {
  try {
    f();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_gpt: the audit log's %s record failed: %s; training goes on\n", what, e.what());
  }
}

}  // namespace

RunAudit::RunAudit(const RunConfig& config, loom::World& world, int argc, char** argv) : world_(world) {
  for (int i = 0; i < argc; ++i) command_line_ += (i > 0 ? " " : "") + std::string(argv[i]);
  if (config.audit_log.empty()) return;
  loom::comm::Communicator* comm = world.size() > 1 ? &world.comm() : nullptr;
  log_ = loom::audit::AuditLog(config.audit_log, comm, loom::io::at_rest_key());
}

void RunAudit::start(const std::string& devices, const std::string& configuration,
                     const std::vector<std::string>& data_files) {
  if (!enabled()) return;
  const auto key = loom::io::at_rest_key();
  nlohmann::json start = {{"keyed", key != nullptr},
                          {"user", loom::audit::current_user()},
                          {"host", loom::audit::current_host()},
                          {"ranks", world_.size()},
                          {"command_line", command_line_},
                          {"configuration_digest", loom::audit::record_hash(configuration, nullptr)},
                          {"configuration", configuration},
                          {"loom_build", loom::to_string(loom::build_info())}};
  if (key) start["key_id"] = key->id_hex();
  if (world_.rank() == 0) rank_zero_only("run_start", [&] { log_.record("run_start", start); });
  const std::string prefix = "devices: ";
  log_.record("rank_start", {{"device", devices.starts_with(prefix) ? devices.substr(prefix.size()) : devices},
                             {"host", loom::audit::current_host()},
                             {"local_rank", world_.launch().local_rank}});
  if (world_.rank() == 0) rank_zero_only("data_open", [&] {
    // Every rank opens the same files; rank 0 reads each once for its digest.
    for (const std::string& path : data_files) {
      struct stat info {};
      const std::int64_t bytes = ::stat(path.c_str(), &info) == 0 ? static_cast<std::int64_t>(info.st_size) : -1;
      log_.record("data_open", {{"path", fs::absolute(path).string()}, {"bytes", bytes},
                                {"blake2b", loom::audit::file_digest_hex(path)},
                                {"encrypted", loom::io::is_encrypted_at_rest(path)}});
    }
  });
  log_.exchange();
}

RunAudit::~RunAudit() {
  if (!digester_.joinable()) return;
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  digester_.join();  // after the queue is empty: no record is lost
}

void RunAudit::weights_loaded(const std::string& source) {
  if (!enabled() || world_.rank() != 0) return;
  rank_zero_only("weights_loaded", [&] {
    std::string path = source;
    for (const char* prefix : {"hf:", "llmc:", "loom:"}) {
      if (path.starts_with(prefix)) path = path.substr(std::string_view(prefix).size());
    }
    // A run directory gives the checkpoint its `latest` names (what read_gpt_weights reads).
    if (fs::is_directory(path) && !fs::exists(fs::path(path) / "state.json") && fs::exists(fs::path(path) / "latest")) {
      path = loom::io::checkpoint_or_latest(path);
    }
    nlohmann::json fields = {{"source", source}, {"path", fs::absolute(path).string()}};
    if (fs::is_directory(path)) {
      fields["files"] = folder_digests(path);
    } else {
      fields["bytes"] = static_cast<std::int64_t>(fs::file_size(path));
      fields["blake2b"] = loom::audit::file_digest_hex(path);
    }
    const std::lock_guard lock(mutex_);
    log_.record("weights_loaded", fields);
  });
}

void RunAudit::checkpoint_loaded(const std::string& dir, std::int64_t step) {
  if (!enabled() || world_.rank() != 0) return;
  rank_zero_only("checkpoint_loaded", [&] {
    const nlohmann::json files = folder_digests(dir);
    const std::lock_guard lock(mutex_);
    log_.record("checkpoint_loaded", {{"path", fs::absolute(dir).string()}, {"step", step}, {"files", files}});
  });
}

void RunAudit::checkpoint_written(const loom::io::SaveReport& save) {
  if (!enabled() || world_.rank() != 0) return;
  rank_zero_only("checkpoint_written", [&] {
    // The thread first: a record queued that no thread would take would hold up the end for ever.
    if (!digester_.joinable()) digester_ = std::thread([this] { digest_loop(); });
    {
      const std::lock_guard lock(mutex_);
      digests_.push_back(save);
    }
    changed_.notify_all();
  });
}

void RunAudit::digest_loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return stopping_ || !digests_.empty(); });
    if (digests_.empty()) return;  // stopping, and nothing left
    const loom::io::SaveReport save = digests_.front();
    lock.unlock();
    rank_zero_only("checkpoint_written", [&] {
      const nlohmann::json files = folder_digests(save.where);
      const std::lock_guard write(mutex_);
      log_.record("checkpoint_written", {{"path", fs::absolute(save.where).string()}, {"step", save.step},
                                         {"asynchronous", save.asynchronous}, {"bytes_per_rank", save.bytes},
                                         {"files", files}});
    });
    lock.lock();
    digests_.pop_front();
    changed_.notify_all();
  }
}

void RunAudit::settle_where(const std::function<bool(const std::string&)>& done) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] {
    return std::all_of(digests_.begin(), digests_.end(), [&](const loom::io::SaveReport& s) { return done(s.where); });
  });
}

void RunAudit::settle_before_deleting(const std::vector<std::string>& doomed) {
  if (!enabled() || world_.rank() != 0 || doomed.empty()) return;
  // Step folders are named uniquely within a run directory: compared by name.
  settle_where([&](const std::string& where) {
    return std::none_of(doomed.begin(), doomed.end(), [&](const std::string& d) {
      return fs::path(d).filename() == fs::path(where).filename();
    });
  });
}

void RunAudit::stopped(const std::string& why, const std::string& saved) {
  if (!enabled() || world_.rank() != 0) return;
  settle_where([](const std::string&) { return false; });
  rank_zero_only("stop", [&] {
    const std::lock_guard lock(mutex_);
    log_.record("stop", {{"reason", why}, {"saved", saved}});
  });
}

void RunAudit::end(int exit_code, const std::string& error, bool collective) {
  if (!enabled() || ended_) return;
  ended_ = true;
  if (world_.rank() == 0) settle_where([](const std::string&) { return false; });  // the saves' records first
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  nlohmann::json end = {{"exit_code", exit_code}, {"steps", steps_}};
  if (!error.empty()) end["error"] = error;
  if (collective) {
    log_.record("rank_end", {{"device_seconds", seconds}});
    log_.exchange();
  } else {
    end["note"] = "the run failed; the other ranks' ends are not recorded";
    end["device_seconds_rank_0"] = seconds;
  }
  if (world_.rank() == 0) rank_zero_only("run_end", [&] {
    const std::lock_guard lock(mutex_);
    log_.record("run_end", end);
  });
}

}  // namespace train_gpt
