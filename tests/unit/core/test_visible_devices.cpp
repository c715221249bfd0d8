// CUDA_VISIBLE_DEVICES as the CUDA driver reads it, on crafted values: unset (every GPU), empty (no
// GPU), indices in the order given, full and abbreviated GPU UUIDs, MIG UUIDs in both forms, and
// the first invalid entry ending the list with the rest reported as ignored; UUID bytes formatted
// as nvidia-smi prints them.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "loom/core/visible_devices.hpp"

using loom::parse_visible_devices;
using Kind = loom::VisibleDeviceSelector::Kind;

namespace {
constexpr const char* h200 = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6";
constexpr const char* mig = "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f";
}  // namespace

TEST_CASE("unset means every GPU, empty means none", "[visible_devices]") {
  const loom::VisibleDevices unset = parse_visible_devices(std::nullopt);
  CHECK(unset.all);
  CHECK_FALSE(unset.none());
  CHECK(unset.selectors.empty());
  CHECK(unset.describe() == "CUDA_VISIBLE_DEVICES unset (every GPU)");
  for (const char* value : {"", "  "}) {
    const loom::VisibleDevices empty = parse_visible_devices(std::string_view(value));
    CHECK_FALSE(empty.all);
    CHECK(empty.none());
    CHECK(empty.ignored.empty());
    CHECK(empty.describe() == "CUDA_VISIBLE_DEVICES=" + std::string(value) + " (no GPU)");
  }
}

TEST_CASE("indices are kept in the order given", "[visible_devices]") {
  const loom::VisibleDevices v = parse_visible_devices(std::string_view("2,0, 7"));
  REQUIRE(v.selectors.size() == 3);
  CHECK(v.selectors[0].kind == Kind::index);
  CHECK(v.selectors[0].index == 2);
  CHECK(v.selectors[1].index == 0);
  CHECK(v.selectors[2].index == 7);
  CHECK(v.selectors[2].text == "7");
  CHECK(v.ignored.empty());
  CHECK(v.describe() == "CUDA_VISIBLE_DEVICES=2,0, 7");
}

TEST_CASE("the first invalid entry ends the list and the rest is ignored", "[visible_devices]") {
  // CUDA's own example: 0,2,-1,1 makes devices 0 and 2 visible, not 1.
  const loom::VisibleDevices v = parse_visible_devices(std::string_view("0,2,-1,1"));
  REQUIRE(v.selectors.size() == 2);
  CHECK(v.selectors[0].index == 0);
  CHECK(v.selectors[1].index == 2);
  CHECK(v.ignored == "-1,1");
  CHECK(v.describe() == "CUDA_VISIBLE_DEVICES=0,2,-1,1 (CUDA ignores '-1,1')");
  for (const auto& [value, kept, ignored] :
       {std::tuple{"1,,2", 1u, ",2"}, std::tuple{"+1", 0u, "+1"}, std::tuple{"0x1", 0u, "0x1"},
        std::tuple{"1a,0", 0u, "1a,0"}, std::tuple{"0,GPU-", 1u, "GPU-"}, std::tuple{"0,GPU-xyz", 1u, "GPU-xyz"},
        std::tuple{"GPU-8932f937d72c", 0u, "GPU-8932f937d72c"}, std::tuple{"3,99999999999", 1u, "99999999999"},
        std::tuple{"1,", 1u, ""}, std::tuple{"MIG-GPU-8932f937/1/0", 0u, "MIG-GPU-8932f937/1/0"},
        std::tuple{"nvidia0", 0u, "nvidia0"}}) {
    INFO(value);
    const loom::VisibleDevices w = parse_visible_devices(std::string_view(value));
    CHECK(w.selectors.size() == kept);
    CHECK(w.ignored == ignored);
    CHECK_FALSE(w.all);
  }
}

TEST_CASE("GPU UUIDs, whole or abbreviated, name a device by prefix", "[visible_devices]") {
  const loom::VisibleDevices v =
      parse_visible_devices(std::string_view(std::string(h200) + ",gpu-8932F937,GPU-1,1"));
  REQUIRE(v.selectors.size() == 4);
  CHECK(v.selectors[0].kind == Kind::gpu_uuid);
  CHECK(v.selectors[0].uuid == h200);
  CHECK(v.selectors[0].names_uuid(h200));
  CHECK(v.selectors[1].uuid == "GPU-8932f937");  // lower-cased, prefix kept as a prefix
  CHECK(v.selectors[1].names_uuid(h200));
  CHECK(v.selectors[1].names_uuid("GPU-8932F937-D72C-4106-C12F-20BD9FAED9F6"));
  CHECK_FALSE(v.selectors[2].names_uuid(h200));
  CHECK(v.selectors[3].kind == Kind::index);
  CHECK_FALSE(v.selectors[3].names_uuid(h200));  // an index names no UUID
  // A GPU selector does not name a MIG instance whose digits happen to match, nor the reverse.
  CHECK_FALSE(v.selectors[1].names_uuid("MIG-8932f937-d72c-4106-c12f-20bd9faed9f6"));
}

TEST_CASE("MIG devices are named by their UUID or by GPU, GPU instance and compute instance", "[visible_devices]") {
  const loom::VisibleDevices v = parse_visible_devices(
      std::string_view(std::string(mig) + ",MIG-GPU-8932f937-d72c-4106-c12f-20bd9faed9f6/3/0,MIG-c6d4"));
  REQUIRE(v.selectors.size() == 3);
  CHECK(v.selectors[0].kind == Kind::mig_uuid);
  CHECK(v.selectors[0].uuid == mig);
  CHECK(v.selectors[0].names_uuid(mig));
  CHECK_FALSE(v.selectors[0].names_uuid(h200));
  CHECK(v.selectors[1].kind == Kind::mig_legacy);
  CHECK(v.selectors[1].uuid == h200);
  CHECK(v.selectors[1].gpu_instance == 3);
  CHECK(v.selectors[1].compute_instance == 0);
  CHECK_FALSE(v.selectors[1].names_uuid(h200));  // it names an instance on that GPU, not the GPU
  CHECK(v.selectors[2].kind == Kind::mig_uuid);
  CHECK(v.selectors[2].names_uuid(mig));
  // Legacy entries need the whole GPU UUID and both instance numbers.
  CHECK(parse_visible_devices(std::string_view("MIG-GPU-8932f937-d72c-4106-c12f-20bd9faed9f6/3")).selectors.empty());
  CHECK(parse_visible_devices(std::string_view("MIG-GPU-8932f937-d72c-4106-c12f-20bd9faed9f6/3/x")).selectors.empty());
}

TEST_CASE("the environment's value is read as it is set", "[visible_devices]") {
  const char* saved = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string before = saved != nullptr ? saved : "";
  ::setenv("CUDA_VISIBLE_DEVICES", "1,0", 1);
  const loom::VisibleDevices set = loom::visible_devices_from_environment();
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  const loom::VisibleDevices unset = loom::visible_devices_from_environment();
  if (saved != nullptr) ::setenv("CUDA_VISIBLE_DEVICES", before.c_str(), 1);
  REQUIRE(set.selectors.size() == 2);
  CHECK(set.selectors[0].index == 1);
  CHECK(unset.all);
}

TEST_CASE("UUID bytes are written as nvidia-smi writes them", "[visible_devices]") {
  const std::array<unsigned char, 16> bytes = {0x89, 0x32, 0xf9, 0x37, 0xd7, 0x2c, 0x41, 0x06,
                                               0xc1, 0x2f, 0x20, 0xbd, 0x9f, 0xae, 0xd9, 0xf6};
  CHECK(loom::format_uuid(bytes) == "8932f937-d72c-4106-c12f-20bd9faed9f6");
  CHECK(loom::uuid_digits(h200) == "8932f937-d72c-4106-c12f-20bd9faed9f6");
  CHECK(loom::uuid_digits("MIG-ABC") == "abc");
  CHECK(loom::uuid_digits("abc") == "abc");
}
