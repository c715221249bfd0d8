// crypt::SecretKey: a key file written by save() loads back to the same key (same id, same
// encryption), with mode 0600; group- or world-accessible key files, links, other files and text
// that is not a key are refused by name; LOOM_KEY_FILE is read when no path is given. (The key id
// against Python's hashlib BLAKE2b is checked in tests/examples/check_loom_crypt.sh.)
#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "loom/core/error.hpp"
#include "loom/crypt/encrypted_file.hpp"
#include "loom/crypt/key.hpp"

namespace fs = std::filesystem;
using loom::crypt::SecretKey;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("loom_test_key_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_text(const fs::path& path, const std::string& text, fs::perms perms) {
  std::ofstream(path) << text;
  fs::permissions(path, perms);
}

unsigned mode_of(const fs::path& path) {
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return info.st_mode & 07777;
}

std::string refusal(const fs::path& path) {
  try {
    SecretKey::load(path.string());
  } catch (const loom::Error& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST_CASE("a saved key loads back as the same key, from a file only its owner can use", "[crypt]") {
  const fs::path dir = fresh_dir("round_trip");
  const SecretKey key = SecretKey::generate();
  key.save((dir / "k").string());
  CHECK(mode_of(dir / "k") == 0600);
  const SecretKey loaded = SecretKey::load((dir / "k").string());
  CHECK(loaded.id() == key.id());
  CHECK(std::equal(key.material(), key.material() + loom::crypt::key_bytes, loaded.material()));
  // Same key: what one encrypts the other decrypts.
  const std::vector<unsigned char> text{1, 2, 3, 4, 5};
  loom::crypt::write_encrypted_file((dir / "e").string(), text, key);
  CHECK(loom::crypt::read_encrypted_file((dir / "e").string(), loaded) == text);
  // Two generated keys differ, and so do their ids.
  CHECK(SecretKey::generate().id() != key.id());
  CHECK(key.id_hex().size() == 2 * loom::crypt::key_id_bytes);
  CHECK_THROWS_WITH(key.save((dir / "k").string()), Catch::Contains("exists; a key is never overwritten"));
}

TEST_CASE("key files that others may read, links and non-keys are refused by name", "[crypt]") {
  const fs::path dir = fresh_dir("refused");
  SecretKey::generate().save((dir / "k").string());
  std::string line;
  std::getline(std::ifstream(dir / "k"), line);
  write_text(dir / "open", line + "\n", fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                                            fs::perms::others_read);
  CHECK_THAT(refusal(dir / "open"), Catch::Contains("has mode 0644") && Catch::Contains("chmod 600"));
  write_text(dir / "group", line, fs::perms::owner_read | fs::perms::group_write);
  CHECK_THAT(refusal(dir / "group"), Catch::Contains("has mode 0420"));
  fs::create_symlink(dir / "k", dir / "link");
  CHECK_THAT(refusal(dir / "link"), Catch::Contains("is a symbolic link"));
  fs::create_directory(dir / "folder");
  fs::permissions(dir / "folder", fs::perms::owner_all);
  CHECK_THAT(refusal(dir / "folder"), Catch::Contains("is not a regular file"));
  write_text(dir / "short", "loom-key-1 abcd\n", fs::perms::owner_read);
  CHECK_THAT(refusal(dir / "short"), Catch::Contains("is not a loom key file"));
  std::string not_hex = line;
  not_hex.back() = 'z';
  write_text(dir / "not_hex", not_hex, fs::perms::owner_read);
  CHECK_THAT(refusal(dir / "not_hex"), Catch::Contains("not hex digits"));
  CHECK_THAT(refusal(dir / "missing"), Catch::Contains("cannot open key file"));
  // The owner-only original loads, with or without its newline.
  write_text(dir / "no_newline", line, fs::perms::owner_read);
  CHECK(SecretKey::load((dir / "no_newline").string()).id() == SecretKey::load((dir / "k").string()).id());
}

TEST_CASE("a key from bytes has the id Python's hashlib gives it, and loads from its key file", "[crypt]") {
  std::array<unsigned char, loom::crypt::key_bytes> bytes{};
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i);
  const SecretKey key = SecretKey::from_bytes(bytes);
  // hashlib.blake2b(b"loom key id 1", key=bytes(range(32)), digest_size=16).hexdigest()
  CHECK(key.id_hex() == "ae25a3f39c0db33af210f04724ed38b7");
  const fs::path dir = fresh_dir("from_bytes");
  write_text(dir / "k", "loom-key-1 " + loom::crypt::to_hex(bytes) + "\n", fs::perms::owner_read);
  CHECK(SecretKey::load((dir / "k").string()).id() == key.id());
}

TEST_CASE("LOOM_KEY_FILE names the key when no path is given", "[crypt]") {
  const fs::path dir = fresh_dir("environment");
  const SecretKey key = SecretKey::generate();
  key.save((dir / "k").string());
  ::unsetenv("LOOM_KEY_FILE");
  CHECK_FALSE(SecretKey::from_flag_or_environment("").has_value());
  ::setenv("LOOM_KEY_FILE", (dir / "k").c_str(), 1);
  const auto from_environment = SecretKey::from_flag_or_environment("");
  ::unsetenv("LOOM_KEY_FILE");
  REQUIRE(from_environment.has_value());
  CHECK(from_environment->id() == key.id());
  CHECK_THROWS_WITH(SecretKey::from_flag_or_environment((dir / "none").string()),
                    Catch::Contains("cannot open key file"));
}
