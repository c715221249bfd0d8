// loom-crypt: keys and encrypted files for loom's encryption at rest (libsodium secretstream; the
// format is in include/loom/crypt/encrypted_file.hpp).
//
//   loom-crypt keygen KEYFILE                      a new key, in a new owner-only file
//   loom-crypt encrypt [--key-file K] IN OUT       a file, or a folder's files into OUT's tree
//   loom-crypt decrypt [--key-file K] IN OUT       the reverse (every chunk verified)
//   loom-crypt rekey --key-file OLD --new-key-file NEW PATH...   in place, files or folders
//   loom-crypt inspect [--key-file K] PATH...      the header; with a key, every chunk verified
//
// The key comes from --key-file or LOOM_KEY_FILE. Folders are walked recursively; what is written
// is owner-only (0600 files, 0700 folders), and each output appears whole or not at all.
#include <CLI/CLI.hpp>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/crypt/encrypted_file.hpp"
#include "loom/crypt/key.hpp"
#include "loom/io/files.hpp"

namespace fs = std::filesystem;
using loom::crypt::SecretKey;

namespace {

SecretKey required_key(const std::string& flag, const char* what) {
  std::optional<SecretKey> key = SecretKey::from_flag_or_environment(flag);
  loom::require(key.has_value(), "loom-crypt ", what, ": no key: give --key-file PATH or set LOOM_KEY_FILE");
  return std::move(*key);
}

// Folders this run creates are owner-only; folders that exist keep their modes.
void make_private_dir(const fs::path& dir) { loom::io::create_private_directories(dir.string()); }

// Applies `one(input, output)` to a file, or to every regular file under a folder (OUT mirrors IN).
template <class One>
std::size_t each_file(const fs::path& in, const fs::path& out, One&& one) {
  loom::require(fs::exists(in), "loom-crypt: '", in.string(), "' does not exist");
  if (!fs::is_directory(in)) {
    if (out.has_parent_path() && !fs::exists(out.parent_path())) make_private_dir(out.parent_path());
    one(in, out);
    return 1;
  }
  loom::require(!fs::exists(out) || fs::is_directory(out), "loom-crypt: '", in.string(), "' is a folder but '",
                out.string(), "' is a file");
  make_private_dir(out);
  std::size_t files = 0;
  const fs::path out_inside = fs::weakly_canonical(out);
  for (auto entry = fs::recursive_directory_iterator(in); entry != fs::recursive_directory_iterator(); ++entry) {
    if (fs::weakly_canonical(entry->path()) == out_inside) {  // OUT inside IN: not its own input
      entry.disable_recursion_pending();
      continue;
    }
    const fs::path target = out / fs::relative(entry->path(), in);
    if (entry->is_directory()) {
      make_private_dir(target);
    } else if (entry->is_regular_file()) {
      one(entry->path(), target);
      ++files;
    }
  }
  return files;
}

std::vector<fs::path> files_under(const std::vector<std::string>& paths) {
  std::vector<fs::path> files;
  for (const std::string& p : paths) {
    loom::require(fs::exists(p), "loom-crypt: '", p, "' does not exist");
    if (!fs::is_directory(p)) {
      files.emplace_back(p);
      continue;
    }
    for (const fs::directory_entry& entry : fs::recursive_directory_iterator(p)) {
      if (entry.is_regular_file()) files.push_back(entry.path());
    }
  }
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"loom-crypt: keys and encrypted files for loom's encryption at rest"};
  app.require_subcommand(1);
  std::string key_file, new_key_file, in, out;
  std::vector<std::string> paths;
  std::size_t chunk_kb = loom::crypt::default_chunk_bytes >> 10;

  CLI::App* keygen = app.add_subcommand("keygen", "write a new key to a new owner-only file");
  keygen->add_option("keyfile", out, "the key file to create (never overwritten)")->required();
  CLI::App* encrypt = app.add_subcommand("encrypt", "encrypt a file, or every file of a folder");
  CLI::App* decrypt = app.add_subcommand("decrypt", "decrypt a file, or every file of a folder");
  for (CLI::App* sub : {encrypt, decrypt}) {
    sub->add_option("--key-file", key_file, "key file (default: LOOM_KEY_FILE)");
    sub->add_option("input", in, "file or folder")->required();
    sub->add_option("output", out, "file or folder (created)")->required();
  }
  encrypt->add_option("--chunk-kb", chunk_kb, "plaintext KiB per authenticated chunk (1 .. 65536)");
  CLI::App* rekey = app.add_subcommand("rekey", "re-encrypt files in place under a new key");
  rekey->add_option("--key-file", key_file, "the files' key now (default: LOOM_KEY_FILE)");
  rekey->add_option("--new-key-file", new_key_file, "the key to encrypt under")->required();
  rekey->add_option("paths", paths, "files or folders")->required();
  CLI::App* inspect = app.add_subcommand("inspect", "print encrypted files' headers; with a key, verify them");
  inspect->add_option("--key-file", key_file, "verify every chunk with this key (default: LOOM_KEY_FILE, if set)");
  inspect->add_option("paths", paths, "files or folders")->required();
  CLI11_PARSE(app, argc, argv);

  try {
    if (keygen->parsed()) {
      const SecretKey key = SecretKey::generate();
      key.save(out);
      std::printf("wrote a new key to %s (mode 0600), key id %s\n", out.c_str(), key.id_hex().c_str());
    } else if (encrypt->parsed()) {
      const SecretKey key = required_key(key_file, "encrypt");
      const std::size_t n = each_file(in, out, [&](const fs::path& from, const fs::path& to) {
        loom::crypt::encrypt_file(from.string(), to.string(), key, chunk_kb << 10);
      });
      std::printf("encrypted %zu file(s) into %s with key id %s\n", n, out.c_str(), key.id_hex().c_str());
    } else if (decrypt->parsed()) {
      const SecretKey key = required_key(key_file, "decrypt");
      const std::size_t n = each_file(in, out, [&](const fs::path& from, const fs::path& to) {
        loom::crypt::decrypt_file(from.string(), to.string(), key);
      });
      std::printf("decrypted %zu file(s) into %s\n", n, out.c_str());
    } else if (rekey->parsed()) {
      const SecretKey from = required_key(key_file, "rekey");
      const SecretKey to = SecretKey::load(new_key_file);
      const std::vector<fs::path> files = files_under(paths);
      for (const fs::path& file : files) loom::crypt::rekey_file(file.string(), from, to);
      std::printf("re-encrypted %zu file(s) from key id %s to key id %s\n", files.size(), from.id_hex().c_str(),
                  to.id_hex().c_str());
    } else if (inspect->parsed()) {
      const std::optional<SecretKey> key = SecretKey::from_flag_or_environment(key_file);
      int failures = 0;
      for (const fs::path& file : files_under(paths)) {
        try {
          const loom::crypt::EncryptedFileInfo info = loom::crypt::inspect_encrypted_file(file.string());
          std::string verdict = "not verified (no key)";
          if (key) {
            loom::crypt::verify_encrypted_file(file.string(), *key);  // throws on the first bad chunk
            verdict = "verified";
          }
          std::printf("%s: loom encrypted v%u, key id %s, %llu bytes in %llu chunk(s) of %zu KiB, %s\n",
                      file.c_str(), info.version, loom::crypt::to_hex(info.key_id).c_str(),
                      static_cast<unsigned long long>(info.plaintext_bytes),
                      static_cast<unsigned long long>(info.chunks), info.chunk_bytes >> 10, verdict.c_str());
        } catch (const loom::Error& e) {
          std::printf("%s: %s\n", file.c_str(), e.what());
          ++failures;
        }
      }
      return failures == 0 ? 0 : 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
