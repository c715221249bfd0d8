// loom-audit: reads the audit log train_gpt --audit-log writes (audit/audit_chain.hpp).
//   loom-audit verify FILE [--key-file PATH]   the chain intact (exit 0), or the first record that
//                                              was edited, removed or reordered (exit 1)
//   loom-audit show FILE                       the records as a table
// A keyed log needs its key (--key-file, or LOOM_KEY_FILE). Exit 2: bad usage or an unreadable file.
#include <CLI/CLI.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <optional>
#include <string>

#include "loom/audit/audit_chain.hpp"
#include "loom/crypt/key.hpp"

namespace {

// A record's fields other than the chain's own, shortened for a table.
std::string summary(const nlohmann::json& record) {
  std::string out;
  for (const auto& [name, value] : record.items()) {
    if (loom::audit::is_reserved_field(name)) continue;
    std::string text = value.is_string() ? value.get<std::string>() : value.dump();
    if (text.size() > 60) text = text.substr(0, 57) + "...";
    out += (out.empty() ? "" : ", ") + name + "=" + text;
  }
  return out.size() > 160 ? out.substr(0, 157) + "..." : out;
}

int verify(const std::string& file, const std::string& key_file) {
  const std::optional<loom::crypt::SecretKey> key = loom::crypt::SecretKey::from_flag_or_environment(key_file);
  const loom::audit::VerifyResult r = loom::audit::verify_audit_file(file, key ? &*key : nullptr);
  for (const std::string& note : r.notes) std::printf("note: %s\n", note.c_str());
  if (!r.ok()) {
    std::printf("%s: %s (%zu records before it verified)\n", file.c_str(), r.problem->message.c_str(), r.records);
    return 1;
  }
  std::printf("ok: %s: %zu records, %zu runs, chain intact (%s)\n", file.c_str(), r.records, r.runs,
              r.keyed ? ("keyed, key id " + r.key_id).c_str() : "unkeyed: edits whose hashes were recomputed pass");
  return 0;
}

int show(const std::string& file) {
  std::ifstream in(file);
  if (!in) {
    std::fprintf(stderr, "loom-audit: cannot open '%s'\n", file.c_str());
    return 2;
  }
  std::printf("%6s  %-24s %4s  %-20s %s\n", "seq", "time", "rank", "event", "fields");
  std::size_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    const nlohmann::json r = nlohmann::json::parse(line, nullptr, false);
    if (!r.is_object() || !r.contains("seq") || !r.contains("event")) {
      std::printf("%6s  line %zu is not a record\n", "?", number);
      continue;
    }
    std::printf("%6s  %-24s %4s  %-20s %s\n", r["seq"].dump().c_str(),
                r.value("time", std::string("?")).c_str(), r.contains("rank") ? r["rank"].dump().c_str() : "?",
                r["event"].is_string() ? r["event"].get<std::string>().c_str() : "?", summary(r).c_str());
  }
  std::printf("(the table does not check the chain: loom-audit verify does)\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("loom-audit: verify and show loom's tamper-evident audit logs");
  app.require_subcommand(1);
  std::string file, key_file;
  CLI::App* verify_command = app.add_subcommand("verify", "check the chain; name the first record edited, removed "
                                                           "or reordered");
  verify_command->add_option("file", file, "the audit log")->required();
  verify_command->add_option("--key-file", key_file, "the key of a keyed log (default: LOOM_KEY_FILE)");
  CLI::App* show_command = app.add_subcommand("show", "the records as a table");
  show_command->add_option("file", file, "the audit log")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? 0 : 2;
  }
  try {
    return verify_command->parsed() ? verify(file, key_file) : show(file);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "loom-audit: %s\n", error.what());
    return 2;
  }
}
