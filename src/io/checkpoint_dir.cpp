// A run directory's checkpoints: finding the newest one that verifies, pruning old ones, and
// removing what interrupted saves left behind. Names: step_<8 digits> (committed), .step_<N>.tmp
// (being written), .step_<N>.old (a re-saved step's previous copy), latest (names the current one).
#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/comm/agreement.hpp"
#include "loom/core/error.hpp"
#include "loom/io/at_rest.hpp"
#include "loom/io/checkpoint.hpp"

namespace loom::io {

namespace fs = std::filesystem;

namespace {

// The step of a directory named step_<digits>, or nullopt.
std::optional<std::int64_t> step_of(const std::string& name) {
  constexpr std::string_view prefix = "step_";
  if (!name.starts_with(prefix) || name.size() == prefix.size() || name.size() > prefix.size() + 18) {
    return std::nullopt;
  }
  std::int64_t step = 0;
  for (char c : name.substr(prefix.size())) {
    if (c < '0' || c > '9') return std::nullopt;
    step = step * 10 + (c - '0');
  }
  return step;
}

struct Committed {
  std::int64_t step;
  fs::path path;
};

// The committed checkpoints of run_dir, newest first.
std::vector<Committed> committed_checkpoints(const fs::path& run_dir) {
  std::vector<Committed> found;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(run_dir, error)) {
    const std::optional<std::int64_t> step = step_of(entry.path().filename().string());
    if (step && entry.is_directory(error)) found.push_back({*step, entry.path()});
  }
  std::sort(found.begin(), found.end(), [](const Committed& a, const Committed& b) { return a.step > b.step; });
  return found;
}

// The directory `latest` names, or nullopt when there is no readable `latest`.
std::optional<fs::path> latest_target(const std::string& run_dir) {
  try {
    const std::optional<std::string> latest = latest_checkpoint(run_dir);
    return latest ? std::optional<fs::path>(fs::path(*latest)) : std::nullopt;
  } catch (const Error&) {
    return std::nullopt;
  }
}

// The candidates to resume from, in the order to try them (the step directories newest first, and
// `latest`'s target where its step ranks when it is elsewhere); what is odd about `latest` goes
// into search.skipped, and search.any says whether run_dir holds any checkpoint.
std::vector<fs::path> list_candidates(const std::string& run_dir, CheckpointSearch& search) {
  if (!fs::is_directory(run_dir)) return {};
  const std::vector<Committed> committed = committed_checkpoints(run_dir);
  std::vector<fs::path> candidates;
  for (const Committed& c : committed) candidates.push_back(c.path);
  // What `latest` says, for the record; it decides nothing the steps do not.
  const fs::path pointer = fs::path(run_dir) / "latest";
  std::optional<fs::path> named;
  if (fs::exists(pointer)) {
    search.any = true;
    try {
      const std::optional<std::string> target = latest_checkpoint(run_dir);
      if (target) named = fs::path(*target);
      if (!named || !fs::exists(*named)) {
        search.skipped.push_back("'latest' names " + (named ? named->filename().string() : std::string("nothing")) +
                                 ", which does not exist");
      } else if (std::find(candidates.begin(), candidates.end(), *named) == candidates.end()) {
        // Outside the step directories (a re-save's .step_N.old): tried where its step N ranks.
        const std::string name = named->filename().string();
        std::optional<std::int64_t> step;
        if (name.starts_with(".step_") && name.ends_with(".old")) step = step_of(name.substr(1, name.size() - 5));
        auto at = candidates.end();
        if (step) {
          at = candidates.begin();
          for (const Committed& c : committed) {
            if (c.step <= *step) break;
            ++at;
          }
        }
        candidates.insert(at, *named);
      }
    } catch (const Error& e) {
      search.skipped.push_back(std::string("'latest' is unreadable: ") + e.what());
    }
  } else if (!committed.empty()) {
    search.skipped.push_back("'latest' is missing");
  }
  search.any = search.any || !committed.empty();
  return candidates;
}

// A missing or wrong key for any file of a candidate, or a plain checkpoint in a run that reads
// only encrypted ones (io/at_rest.hpp): not damage, so an invalid_argument Error that stops the
// search (passing over every checkpoint for it would start the run afresh, and then prune them).
void require_keys_for(const fs::path& candidate) {
  std::error_code error;
  std::vector<fs::path> files;
  for (fs::directory_iterator it(candidate, error), end; !error && it != end; it.increment(error)) {
    files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());  // the same file named first every time
  for (const fs::path& file : files) require_key_for(file.string());
  require_encrypted_input((candidate / "state.json").string(), "checkpoint file");
}

}  // namespace

CheckpointSearch find_resumable_checkpoint(const std::string& run_dir) {
  CheckpointSearch search;
  for (const fs::path& candidate : list_candidates(run_dir, search)) {
    try {
      require_keys_for(candidate);
    } catch (const Error& e) {
      if (e.category() == ErrorCategory::invalid_argument) throw;  // a key problem; else damage, below
      search.skipped.push_back(candidate.filename().string() + ": " + e.detail());
      continue;
    }
    try {
      search.step = verify_checkpoint(candidate.string());
      search.chosen = candidate.string();
      return search;
    } catch (const Error& e) {
      search.skipped.push_back(candidate.filename().string() + ": " + e.detail());
    }
  }
  return search;
}

CheckpointSearch find_resumable_checkpoint(const std::string& run_dir, comm::Communicator& comm) {
  // Rank 0's listing for every rank: a file system that shows the ranks different directories
  // must not make them try different candidates.
  CheckpointSearch search;
  nlohmann::json listing = nlohmann::json::object();
  if (comm.rank() == 0) {
    std::vector<std::string> names;
    for (const fs::path& candidate : list_candidates(run_dir, search)) names.push_back(candidate.string());
    listing = {{"any", search.any}, {"skipped", search.skipped}, {"candidates", names}};
  }
  listing = nlohmann::json::parse(comm::broadcast_text(comm, listing.dump(), 0));
  search.any = listing.at("any").get<bool>();
  search.skipped = listing.at("skipped").get<std::vector<std::string>>();
  for (const std::string& candidate : listing.at("candidates").get<std::vector<std::string>>()) {
    std::string problem;  // "k" + why for a key problem (not damage: it stops the search), "d" + why
    std::int64_t step = 0;
    // Every failure becomes a problem to share (one escaping on one rank would leave the others
    // waiting in the gather below); only invalid_argument from the key check is a key problem.
    bool keys_checked = false;
    try {
      require_keys_for(candidate);
      keys_checked = true;
      step = verify_checkpoint(candidate, comm.rank(), comm.size());
    } catch (const Error& e) {
      const bool key = !keys_checked && e.category() == ErrorCategory::invalid_argument;
      problem = (key ? "k" : "d") + e.detail();
    } catch (const std::exception& e) {
      problem = "d" + std::string(e.what());
    }
    const std::vector<std::string> problems = comm::all_gather_texts(comm, problem);
    const auto failed = std::find_if(problems.begin(), problems.end(), [](const std::string& p) { return !p.empty(); });
    if (failed == problems.end()) {
      search.step = step;
      search.chosen = candidate;
      return search;
    }
    const auto key = std::find_if(problems.begin(), problems.end(), [](const std::string& p) { return !p.empty() && p[0] == 'k'; });
    if (key != problems.end()) fail(ErrorCategory::invalid_argument, key->substr(1));
    search.skipped.push_back(fs::path(candidate).filename().string() + ": " + failed->substr(1));
  }
  return search;
}

std::vector<std::string> prunable_checkpoints(const std::string& run_dir, int keep, std::int64_t keep_every) {
  require(keep >= 1, "prune_checkpoints: keep must be at least 1, got ", keep);
  require(keep_every >= 0, "prune_checkpoints: keep_every must not be negative, got ", keep_every);
  const std::optional<fs::path> named = latest_target(run_dir);
  std::vector<std::string> prunable;
  const std::vector<Committed> committed = committed_checkpoints(run_dir);
  for (std::size_t i = static_cast<std::size_t>(keep); i < committed.size(); ++i) {
    const Committed& c = committed[i];
    if ((keep_every > 0 && c.step % keep_every == 0) || (named && fs::equivalent(*named, c.path))) continue;
    prunable.push_back(c.path.string());
  }
  return prunable;
}

std::vector<std::string> prune_checkpoints(const std::string& run_dir, int keep, std::int64_t keep_every) {
  std::vector<std::string> removed;
  for (const std::string& path : prunable_checkpoints(run_dir, keep, keep_every)) {
    std::error_code error;
    fs::remove_all(path, error);
    if (error) fail(ErrorCategory::io, "cannot delete the old checkpoint '", path, "': ", error.message());
    removed.push_back(path);
  }
  return removed;
}

std::vector<std::string> remove_stale_temporaries(const std::string& run_dir) {
  std::vector<std::string> removed;
  if (!fs::is_directory(run_dir)) return removed;
  const std::optional<fs::path> named = latest_target(run_dir);
  std::error_code error;
  std::vector<fs::path> stale;
  for (const fs::directory_entry& entry : fs::directory_iterator(run_dir, error)) {
    const std::string name = entry.path().filename().string();
    const bool temporary = name.starts_with(".step_") && (name.ends_with(".tmp") || name.ends_with(".old"));
    if (!temporary || (named && named->filename() == entry.path().filename())) continue;
    stale.push_back(entry.path());
  }
  for (const fs::path& path : stale) {
    fs::remove_all(path, error);
    if (error) fail(ErrorCategory::io, "cannot delete '", path.string(), "' (left by an interrupted save): ", error.message());
    removed.push_back(path.string());
  }
  return removed;
}

}  // namespace loom::io
