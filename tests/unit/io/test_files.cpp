// io/files' owner-only output: write_file_atomically and create_private_directories give 0600
// files and 0700 folders under a permissive umask (0640/0750 when group-readable), leave folders
// that exist as they were, and a folder others may write into is refused by name. (A whole
// checkpoint's modes are checked in test_checkpoint.cpp.)
#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "loom/core/error.hpp"
#include "loom/io/files.hpp"

namespace fs = std::filesystem;

namespace {

unsigned mode_of(const fs::path& path) {
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return info.st_mode & 07777;
}

// Runs body under umask 0 (everything would be 0666/0777), then restores the umask and the
// owner-only default, also when body throws.
template <class Body>
void under_open_umask(Body&& body) {
  struct Restore {
    mode_t umask;
    ~Restore() {
      ::umask(umask);
      loom::io::set_group_readable(false);
    }
  } restore{::umask(0)};
  body();
}

}  // namespace

TEST_CASE("what loom writes is owner-only, or group-readable when asked", "[io]") {
  const fs::path dir = fs::temp_directory_path() / "loom_test_private_files";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_all | fs::perms::group_all, fs::perm_options::replace);
  under_open_umask([&] {
    loom::io::create_private_directories((dir / "a" / "b").string());
    loom::io::write_file_atomically((dir / "a" / "b" / "f").string(), "x");
    CHECK(mode_of(dir / "a") == 0700);
    CHECK(mode_of(dir / "a" / "b") == 0700);
    CHECK(mode_of(dir / "a" / "b" / "f") == 0600);
    CHECK(mode_of(dir) == 0770);  // it existed: left as it was
    loom::io::set_group_readable(true);
    loom::io::create_private_directories((dir / "g").string());
    loom::io::write_file_atomically((dir / "g" / "f").string(), "x");
    loom::io::set_group_readable(false);
    CHECK(mode_of(dir / "g") == 0750);
    CHECK(mode_of(dir / "g" / "f") == 0640);
  });
}

TEST_CASE("a folder others may write into is refused by name", "[io]") {
  const fs::path dir = fs::temp_directory_path() / "loom_test_open_folder";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::all, fs::perm_options::replace);
  CHECK_THROWS_WITH(loom::io::require_not_writable_by_others(dir.string(), "checkpoint folder"),
                    Catch::Contains("checkpoint folder '" + dir.string() + "' has mode 0777: others may write") &&
                        Catch::Contains("chmod o-w"));
  fs::permissions(dir, fs::perms::others_write, fs::perm_options::remove);
  CHECK_NOTHROW(loom::io::require_not_writable_by_others(dir.string(), "checkpoint folder"));
  CHECK_NOTHROW(loom::io::require_not_writable_by_others((dir / "not-yet").string(), "checkpoint folder"));
}
