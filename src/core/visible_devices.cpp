#include "loom/core/visible_devices.hpp"

#include <cctype>
#include <charconv>
#include <cstdlib>

namespace loom {

namespace {

constexpr std::size_t uuid_length = 36;  // 8-4-4-4-12 hex digits

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool starts_with_nocase(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() && lower(text.substr(0, prefix.size())) == lower(prefix);
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

// A non-empty prefix of "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (nvidia-smi's form, dashes where it
// puts them); `whole` asks for all 36 characters.
bool is_uuid_digits(std::string_view digits, bool whole) {
  if (digits.empty() || digits.size() > uuid_length || (whole && digits.size() != uuid_length)) return false;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    const bool dash_here = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash_here ? digits[i] != '-' : !std::isxdigit(static_cast<unsigned char>(digits[i]))) return false;
  }
  return true;
}

std::optional<unsigned> parse_unsigned(std::string_view text) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<VisibleDeviceSelector> parse_selector(std::string_view entry) {
  VisibleDeviceSelector s;
  s.text = std::string(entry);
  if (starts_with_nocase(entry, "MIG-GPU-")) {  // MIG-GPU-<uuid>/<gpu instance>/<compute instance>
    const std::string_view rest = entry.substr(8);
    const std::size_t slash = rest.find('/');
    const std::size_t second = slash == std::string_view::npos ? slash : rest.find('/', slash + 1);
    if (second == std::string_view::npos || !is_uuid_digits(rest.substr(0, slash), true)) return std::nullopt;
    const auto gi = parse_unsigned(rest.substr(slash + 1, second - slash - 1));
    const auto ci = parse_unsigned(rest.substr(second + 1));
    if (!gi || !ci) return std::nullopt;
    s.kind = VisibleDeviceSelector::Kind::mig_legacy;
    s.uuid = "GPU-" + lower(rest.substr(0, slash));
    s.gpu_instance = *gi;
    s.compute_instance = *ci;
    return s;
  }
  for (const auto& [prefix, kind] : {std::pair{"GPU-", VisibleDeviceSelector::Kind::gpu_uuid},
                                     std::pair{"MIG-", VisibleDeviceSelector::Kind::mig_uuid}}) {
    if (!starts_with_nocase(entry, prefix)) continue;
    if (!is_uuid_digits(entry.substr(4), false)) return std::nullopt;
    s.kind = kind;
    s.uuid = std::string(prefix) + lower(entry.substr(4));
    return s;
  }
  // An index: decimal digits only ("-1", "+1", "0x1" and "1a" end the list, as in CUDA).
  for (const char c : entry) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  const auto index = parse_unsigned(entry);
  if (!index || *index > static_cast<unsigned>(INT32_MAX)) return std::nullopt;
  s.kind = VisibleDeviceSelector::Kind::index;
  s.index = static_cast<int>(*index);
  return s;
}

}  // namespace

bool VisibleDeviceSelector::names_uuid(std::string_view full_uuid) const {
  if (kind != Kind::gpu_uuid && kind != Kind::mig_uuid) return false;
  return full_uuid.size() >= uuid.size() && lower(full_uuid.substr(0, uuid.size())) == lower(uuid);
}

std::string VisibleDevices::describe() const {
  if (all) return "CUDA_VISIBLE_DEVICES unset (every GPU)";
  std::string out = "CUDA_VISIBLE_DEVICES=" + value;
  if (selectors.empty()) return out + " (no GPU)";
  if (!ignored.empty()) out += " (CUDA ignores '" + ignored + "')";
  return out;
}

VisibleDevices parse_visible_devices(std::optional<std::string_view> value) {
  VisibleDevices out;
  if (!value) return out;
  out.all = false;
  out.value = std::string(*value);
  if (trim(*value).empty()) return out;
  std::string_view rest = *value;
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string_view entry = trim(rest.substr(0, comma));
    std::optional<VisibleDeviceSelector> selector = parse_selector(entry);
    if (!selector) {
      out.ignored = std::string(trim(rest));
      break;
    }
    out.selectors.push_back(std::move(*selector));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

VisibleDevices visible_devices_from_environment() {
  const char* value = std::getenv("CUDA_VISIBLE_DEVICES");
  return parse_visible_devices(value != nullptr ? std::optional<std::string_view>(value) : std::nullopt);
}

std::string format_uuid(const std::array<unsigned char, 16>& bytes) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(uuid_length);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += hex[bytes[i] >> 4];
    out += hex[bytes[i] & 0xf];
  }
  return out;
}

std::string uuid_digits(std::string_view uuid) {
  if (starts_with_nocase(uuid, "GPU-") || starts_with_nocase(uuid, "MIG-")) uuid.remove_prefix(4);
  return lower(uuid);
}

}  // namespace loom
