// The encrypted file format: plaintexts of every length around the chunk size come back exactly,
// through whole-file and odd-sized streaming reads, and the header's sizes agree; each kind of
// damage gets its own named error and hands on nothing: a wrong key, a flipped byte in the header
// or in any chunk, a header rewritten with a valid checksum, a truncation inside a chunk, a dropped
// final chunk, two chunks swapped, bytes appended, a plain file. A failed decryption leaves the
// output it would have replaced as it was; files are created owner-only; a write that fails on
// the writer's own thread (a full disk) is thrown to the caller and leaves no file.
#include <catch2/catch.hpp>
#include <sodium.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/crypt/encrypted_file.hpp"
#include "support/file_damage.hpp"
#include "support/file_size_limit.hpp"

namespace fs = std::filesystem;
using loom::crypt::SecretKey;

namespace {

constexpr std::size_t chunk = loom::crypt::min_chunk_bytes;  // 1 KiB: many chunks in small files
constexpr std::size_t sealed = chunk + 17;                    // a chunk on disk
constexpr std::size_t header = loom::crypt::header_bytes;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("loom_test_encrypted_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<unsigned char> pattern(std::size_t n, unsigned seed) {
  std::vector<unsigned char> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<unsigned char>((i * 131 + seed * 7 + (i >> 8)) & 0xff);
  return out;
}

// prefix followed by n ("lit" + std::to_string(n) trips GCC 12's -Wrestrict).
std::string numbered(const char* prefix, std::size_t n) { return std::string(prefix).append(std::to_string(n)); }

std::vector<unsigned char> bytes_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_bytes(const fs::path& path, const std::vector<unsigned char>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                               static_cast<std::streamsize>(bytes.size()));
}

// The error reading `path` with `key` gives, or "read" when it reads.
std::string failure(const fs::path& path, const SecretKey& key) {
  try {
    loom::crypt::read_encrypted_file(path.string(), key);
  } catch (const loom::Error& e) {
    return e.what();
  }
  return "read";
}

}  // namespace

TEST_CASE("encrypted files give back their plaintext at every length around the chunk size", "[crypt]") {
  const fs::path dir = fresh_dir("round_trip");
  const SecretKey key = SecretKey::generate();
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, chunk - 1, chunk, chunk + 1, 3 * chunk, 3 * chunk + 5}) {
    INFO(n << " bytes");
    const std::vector<unsigned char> text = pattern(n, static_cast<unsigned>(n));
    const fs::path file = dir / numbered("f", n);
    loom::crypt::write_encrypted_file(file.string(), text, key, chunk);
    CHECK(loom::crypt::is_encrypted_file(file.string()));
    CHECK(loom::crypt::read_encrypted_file(file.string(), key) == text);
    // Streaming in reads of 100 bytes (across chunk boundaries).
    loom::crypt::DecryptingReader reader(file.string(), key);
    std::vector<unsigned char> streamed, piece(100);
    while (const std::size_t got = reader.read(piece)) streamed.insert(streamed.end(), piece.begin(), piece.begin() + static_cast<long>(got));
    CHECK(streamed == text);
    const loom::crypt::EncryptedFileInfo info = loom::crypt::inspect_encrypted_file(file.string());
    CHECK(info.plaintext_bytes == n);
    CHECK(info.chunks == std::max<std::size_t>(1, (n + chunk - 1) / chunk));
    CHECK(info.chunk_bytes == chunk);
    CHECK(info.key_id == key.id());
    CHECK(fs::file_size(file) == header + n + 17 * info.chunks);
    struct stat st {};
    REQUIRE(::stat(file.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
  }
  // Encrypting twice gives different bytes (a fresh stream header), the same plaintext.
  const std::vector<unsigned char> text = pattern(2000, 1);
  loom::crypt::write_encrypted_file((dir / "a").string(), text, key, chunk);
  loom::crypt::write_encrypted_file((dir / "b").string(), text, key, chunk);
  CHECK(bytes_of(dir / "a") != bytes_of(dir / "b"));
}

TEST_CASE("each kind of damage to an encrypted file is named, and nothing of it is used", "[crypt]") {
  const fs::path dir = fresh_dir("damage");
  const SecretKey key = SecretKey::generate();
  const std::vector<unsigned char> text = pattern(3 * chunk + 100, 3);  // chunks 0-2 full, 3 final
  const fs::path good = dir / "good";
  loom::crypt::write_encrypted_file(good.string(), text, key, chunk);
  const std::vector<unsigned char> original = bytes_of(good);
  REQUIRE(original.size() == header + 3 * sealed + 100 + 17);
  const auto damaged = [&](const std::string& name, auto&& damage) {
    std::vector<unsigned char> bytes = original;
    damage(bytes);
    const fs::path path = dir / name;
    write_bytes(path, bytes);
    return path;
  };

  CHECK_THAT(failure(good, SecretKey::generate()), Catch::Contains("was encrypted with another key (key id " + key.id_hex()));
  for (std::size_t c = 0; c < 4; ++c) {
    INFO("chunk " << c);
    const fs::path path = damaged(numbered("flip", c), [&](auto& b) { b[header + c * sealed + 40] ^= 0x10; });
    CHECK_THAT(failure(path, key), Catch::Contains(numbered("chunk ", c).append(" fails authentication")));
  }
  for (const std::size_t at : {std::size_t{0}, std::size_t{12}, std::size_t{20}, std::size_t{40}, std::size_t{70}}) {
    INFO("header byte " << at);
    const fs::path path = damaged(numbered("header", at), [&](auto& b) { b[at] ^= 0x01; });
    CHECK_THAT(failure(path, key), at == 0 ? Catch::Contains("is not a loom encrypted file")
                                           : Catch::Contains("encryption header is damaged"));
  }
  // A header changed with its checksum recomputed (no key needed for that) still fails: it is the
  // first chunk's authenticated data.
  const fs::path forged = damaged("forged", [&](auto& b) {
    b[56] = 1;  // the reserved zeros
    crypto_generichash(b.data() + 64, 16, b.data(), 64, nullptr, 0);
  });
  CHECK_THAT(failure(forged, key), Catch::Contains("chunk 0 fails authentication"));
  const fs::path inside = damaged("truncated", [&](auto& b) { b.resize(header + 2 * sealed + 500); });
  CHECK_THAT(failure(inside, key), Catch::Contains("chunk 2 fails authentication (the file was truncated"));
  const fs::path no_final = damaged("no_final", [&](auto& b) { b.resize(header + 3 * sealed); });
  CHECK_THAT(failure(no_final, key), Catch::Contains("ends after 3 chunk(s) without its final chunk"));
  const fs::path header_only = damaged("header_only", [&](auto& b) { b.resize(header + 10); });
  CHECK_THAT(failure(header_only, key), Catch::Contains("truncated inside chunk 0"));
  // inspect, which reads no chunk, judges the size: no chunk at all, or a tail no chunk can be.
  CHECK_THROWS_WITH(loom::crypt::inspect_encrypted_file(header_only.string()),
                    Catch::Contains("ends inside a chunk (10 bytes"));
  const fs::path bare = damaged("bare", [&](auto& b) { b.resize(header); });
  CHECK_THROWS_WITH(loom::crypt::inspect_encrypted_file(bare.string()),
                    Catch::Contains("has no chunk after its header"));
  CHECK_THAT(failure(bare, key), Catch::Contains("ends after 0 chunk(s) without its final chunk"));
  const fs::path in_header = damaged("in_header", [&](auto& b) { b.resize(40); });
  CHECK_THAT(failure(in_header, key), Catch::Contains("truncated inside its encryption header"));
  const fs::path swapped = damaged("swapped", [&](auto& b) {
    std::swap_ranges(b.begin() + static_cast<long>(header + sealed), b.begin() + static_cast<long>(header + 2 * sealed),
                     b.begin() + static_cast<long>(header + 2 * sealed));
  });
  CHECK_THAT(failure(swapped, key), Catch::Contains("chunk 1 fails authentication"));
  // Bytes appended after a short final chunk make it fail as that chunk; after a full one, they
  // are named as such.
  const fs::path appended = damaged("appended", [&](auto& b) { b.push_back(0); });
  CHECK_THAT(failure(appended, key), Catch::Contains("chunk 3 fails authentication (the file was truncated or appended"));
  const fs::path full = dir / "full";
  loom::crypt::write_encrypted_file(full.string(), pattern(2 * chunk, 4), key, chunk);
  std::vector<unsigned char> full_bytes = bytes_of(full);
  full_bytes.push_back(0);
  write_bytes(dir / "full_appended", full_bytes);
  CHECK_THAT(failure(dir / "full_appended", key), Catch::Contains("has bytes after its final chunk (chunk 1)"));
  const fs::path plain = dir / "plain";
  write_bytes(plain, text);
  CHECK_THAT(failure(plain, key), Catch::Contains("is not a loom encrypted file") && Catch::Contains("a plain file"));
  CHECK_THAT(failure(dir / "missing", key), Catch::Contains("cannot open"));

  // The streaming reader hands on the chunks before the damaged one, then fails, never a byte of it.
  loom::crypt::DecryptingReader reader((dir / "flip2").string(), key);
  std::vector<unsigned char> out(10 * chunk), delivered;
  try {
    for (;;) {
      const std::size_t got = reader.read(out);
      delivered.insert(delivered.end(), out.begin(), out.begin() + static_cast<long>(got));
      if (got == 0) break;
    }
    FAIL("the damaged chunk was read");
  } catch (const loom::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("chunk 2 fails authentication"));
  }
  CHECK(delivered == std::vector<unsigned char>(text.begin(), text.begin() + 2 * chunk));
  // A failed decryption leaves the output it would have replaced untouched, and no temporary file.
  write_bytes(dir / "out", {9, 9, 9});
  CHECK_THROWS(loom::crypt::decrypt_file((dir / "flip3").string(), (dir / "out").string(), key));
  CHECK(bytes_of(dir / "out") == std::vector<unsigned char>{9, 9, 9});
  CHECK_FALSE(fs::exists(dir / "out.tmp"));
}

TEST_CASE("files encrypt and decrypt file to file, and an unfinished writer leaves nothing", "[crypt]") {
  const fs::path dir = fresh_dir("files");
  const SecretKey key = SecretKey::generate();
  const std::vector<unsigned char> text = pattern(5 * chunk + 3, 9);
  write_bytes(dir / "plain", text);
  loom::crypt::encrypt_file((dir / "plain").string(), (dir / "enc").string(), key, chunk);
  loom::crypt::decrypt_file((dir / "enc").string(), (dir / "back").string(), key);
  CHECK(bytes_of(dir / "back") == text);
  // A link planted where the temporary goes is replaced, not written through; a writer refuses a
  // link at its own path.
  write_bytes(dir / "victim", {1, 2, 3});
  fs::create_symlink(dir / "victim", dir / "again.tmp");
  loom::crypt::decrypt_file((dir / "enc").string(), (dir / "again").string(), key);
  CHECK(bytes_of(dir / "again") == text);
  CHECK(bytes_of(dir / "victim") == std::vector<unsigned char>{1, 2, 3});
  fs::create_symlink(dir / "victim", dir / "link");
  CHECK_THROWS_WITH(loom::crypt::EncryptingWriter((dir / "link").string(), key, chunk), Catch::Contains("cannot create"));
  CHECK(bytes_of(dir / "victim") == std::vector<unsigned char>{1, 2, 3});
  {
    loom::crypt::EncryptingWriter writer((dir / "unfinished").string(), key, chunk);
    writer.write(text);
  }
  CHECK_FALSE(fs::exists(dir / "unfinished"));
  CHECK_THROWS_WITH(loom::crypt::EncryptingWriter((dir / "x").string(), key, 100), Catch::Contains("outside 1024"));
}

TEST_CASE("a write that fails on the writer's thread is thrown by a later call, and the file is removed", "[crypt]") {
  const fs::path dir = fresh_dir("full");
  const SecretKey key = SecretKey::generate();
  const std::vector<unsigned char> text = pattern(40 * chunk, 4);
  std::string failure;
  {
    const loom::test::FileSizeLimit limit(header + 3 * sealed + 100);  // the disk fills in the fourth chunk
    try {
      loom::crypt::EncryptingWriter writer((dir / "big").string(), key, chunk);
      for (std::size_t at = 0; at < text.size(); at += chunk) {
        writer.write({text.data() + at, chunk});
      }
      writer.close();
    } catch (const loom::Error& e) {
      failure = e.what();
    }
  }
  CHECK_THAT(failure, Catch::Contains("cannot write") && Catch::Contains("big"));
  CHECK_FALSE(fs::exists(dir / "big"));
  // The same writer, room enough: every chunk reaches the file in order.
  loom::crypt::EncryptingWriter writer((dir / "big").string(), key, chunk);
  for (std::size_t at = 0; at < text.size(); at += chunk) writer.write({text.data() + at, chunk});
  writer.close();
  CHECK(loom::crypt::read_encrypted_file((dir / "big").string(), key) == text);
}
