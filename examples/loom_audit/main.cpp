// loom-audit: reads the audit log train_gpt --audit-log writes (audit/audit_chain.hpp).
//   loom-audit verify FILE [--key-file PATH]   the chain intact (exit 0), or the first record that
//                                              was edited, removed or reordered (exit 1)
//   loom-audit show FILE                       the records as a table
// A keyed log needs its key (--key-file, or LOOM_KEY_FILE), and a key given demands a keyed log (an
// unkeyed one is what a keyed log rewritten without its key looks like). Exit 2: bad usage or an
// unreadable file. Messages are stable for scripts: "ok: ", or the finding's kind (edited, removed,
// reordered, malformed, truncated, key) followed by ": line N (seq S)".
#include <CLI/CLI.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <optional>
#include <string>

#include "loom/audit/audit_chain.hpp"
#include "loom/crypt/key.hpp"

namespace {

// A log is untrusted text: control bytes (a terminal's escape sequences could hide or forge lines
// on the screen) are printed as \xNN.
std::string printable(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) {
      out += c;
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      out += escaped;
    }
  }
  return out;
}

// A value as short text, objects and arrays three levels deep at most: nlohmann's dump() recurses,
// and a line nested a hundred thousand deep would exhaust the stack.
void append_short(std::string& out, const nlohmann::json& value, int depth) {
  constexpr std::size_t enough = 200;
  if (out.size() > enough) return;
  if (!value.is_structured()) {
    out += value.is_string() ? value.get<std::string>() : value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return;
  }
  if (depth >= 3) {
    out += value.is_object() ? "{...}" : "[...]";
    return;
  }
  out += value.is_object() ? '{' : '[';
  bool first = true;
  for (auto it = value.begin(); it != value.end() && out.size() <= enough; ++it) {
    if (!first) out += ',';
    first = false;
    if (value.is_object()) out.append(it.key()).append(":");
    append_short(out, *it, depth + 1);
  }
  out += value.is_object() ? '}' : ']';
}

// A record's fields other than the chain's own, shortened for a table.
std::string summary(const nlohmann::json& record) {
  std::string out;
  for (const auto& [name, value] : record.items()) {
    if (loom::audit::is_reserved_field(name)) continue;
    std::string text;
    append_short(text, value, 0);
    if (text.size() > 60) text = text.substr(0, 57) + "...";
    out.append(out.empty() ? "" : ", ").append(name).append("=").append(text);
  }
  return printable(out.size() > 160 ? out.substr(0, 157) + "..." : out);
}

int verify(const std::string& file, const std::string& key_file) {
  const std::optional<loom::crypt::SecretKey> key = loom::crypt::SecretKey::from_flag_or_environment(key_file);
  const loom::audit::VerifyResult r = loom::audit::verify_audit_file(file, key ? &*key : nullptr);
  for (const std::string& note : r.notes) std::printf("note: %s\n", printable(note).c_str());
  if (!r.ok()) {
    std::printf("%s: %s (%zu records before it verified)\n", file.c_str(), printable(r.problem->message).c_str(),
                r.records);
    return 1;
  }
  std::printf("ok: %s: %zu records, %zu runs, chain intact (%s)\n", file.c_str(), r.records, r.runs,
              r.keyed ? printable("keyed, key id " + r.key_id).c_str()
                      : "unkeyed: edits whose hashes were recomputed pass");
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
    const auto text_of = [&](const char* name) {
      std::string text;
      if (r.contains(name)) append_short(text, r[name], 2);
      return text.empty() ? std::string("?") : printable(text.substr(0, 40));
    };
    std::printf("%6s  %-24s %4s  %-20s %s\n", text_of("seq").c_str(), text_of("time").c_str(), text_of("rank").c_str(),
                text_of("event").c_str(), summary(r).c_str());
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
