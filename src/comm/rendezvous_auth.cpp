#include "src/comm/rendezvous_auth.hpp"

#include <sodium.h>

#include <cstdlib>
#include <cstring>

#include "loom/core/error.hpp"
#include "loom/crypt/key.hpp"

namespace loom::comm {

namespace {

constexpr char kdf_context[crypto_kdf_CONTEXTBYTES + 1] = "loomrdzv";
constexpr char token_label[] = "loom job token 1";
constexpr char answer_label[] = "loom rendezvous answer";
constexpr char blob_label[] = "loom rendezvous blob";
constexpr std::size_t min_token_characters = 16;
static_assert(crypto_auth_BYTES == detail::answer_tag_bytes && crypto_auth_KEYBYTES == 32);
static_assert(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES == detail::seal_nonce_bytes);
static_assert(crypto_aead_xchacha20poly1305_ietf_ABYTES == detail::seal_overhead_bytes);
static_assert(crypto_kdf_KEYBYTES == 32);

// label | rank 0's challenge | the peer's | header: what the tags and the seal bind.
std::vector<unsigned char> bound(const char* label, const detail::Challenge& root, const detail::Challenge& peer,
                                 std::span<const unsigned char> header) {
  std::vector<unsigned char> out(label, label + std::strlen(label));
  out.insert(out.end(), root.begin(), root.end());
  out.insert(out.end(), peer.begin(), peer.end());
  out.insert(out.end(), header.begin(), header.end());
  return out;
}

}  // namespace

RendezvousSecret::RendezvousSecret(const unsigned char* master) : keys_(std::make_unique<Keys>()) {
  crypt::ensure_sodium();
  keys_->memory = static_cast<unsigned char*>(sodium_malloc(64));
  if (keys_->memory == nullptr) fail(ErrorCategory::out_of_memory, "rendezvous secret: sodium_malloc failed");
  crypto_kdf_derive_from_key(keys_->memory, 32, 1, kdf_context, master);
  crypto_kdf_derive_from_key(keys_->memory + 32, 32, 2, kdf_context, master);
}

RendezvousSecret::~RendezvousSecret() {
  if (keys_ && keys_->memory != nullptr) sodium_free(keys_->memory);
}

RendezvousSecret::RendezvousSecret(RendezvousSecret&&) noexcept = default;

RendezvousSecret& RendezvousSecret::operator=(RendezvousSecret&& other) noexcept {
  if (this != &other) {
    if (keys_ && keys_->memory != nullptr) sodium_free(keys_->memory);
    keys_ = std::move(other.keys_);
  }
  return *this;
}

RendezvousSecret RendezvousSecret::from_token(std::string_view token) {
  require(token.size() >= min_token_characters, "rendezvous: the job token has ", token.size(),
          " characters; use at least ", min_token_characters, " random ones (e.g. openssl rand -hex 16)");
  crypt::ensure_sodium();
  unsigned char master[crypto_kdf_KEYBYTES];
  crypto_generichash(master, sizeof master, reinterpret_cast<const unsigned char*>(token.data()), token.size(),
                     reinterpret_cast<const unsigned char*>(token_label), sizeof(token_label) - 1);
  RendezvousSecret secret(master);
  sodium_memzero(master, sizeof master);
  return secret;
}

RendezvousSecret RendezvousSecret::from_key(const crypt::SecretKey& key) { return RendezvousSecret(key.material()); }

std::optional<RendezvousSecret> RendezvousSecret::from_environment() {
  if (const char* token = std::getenv("LOOM_JOB_TOKEN"); token != nullptr && *token != '\0') return from_token(token);
  if (const std::optional<crypt::SecretKey> key = crypt::SecretKey::from_flag_or_environment("")) return from_key(*key);
  return std::nullopt;
}

namespace detail {

Challenge fresh_challenge() {
  crypt::ensure_sodium();
  Challenge challenge;
  randombytes_buf(challenge.data(), challenge.size());
  return challenge;
}

Tag answer_tag(const RendezvousSecret::Keys& keys, const Challenge& root, const Challenge& peer,
               std::span<const unsigned char> header) {
  const std::vector<unsigned char> message = bound(answer_label, root, peer, header);
  Tag tag;
  crypto_auth(tag.data(), message.data(), message.size(), keys.auth());
  return tag;
}

bool answer_holds(const RendezvousSecret::Keys& keys, const Challenge& root, const Challenge& peer,
                  std::span<const unsigned char> header, const Tag& tag) {
  const std::vector<unsigned char> message = bound(answer_label, root, peer, header);
  return crypto_auth_verify(tag.data(), message.data(), message.size(), keys.auth()) == 0;
}

std::vector<unsigned char> seal_blob(const RendezvousSecret::Keys& keys, const Challenge& root, const Challenge& peer,
                                     std::span<const unsigned char> header, std::span<const unsigned char> blob) {
  const std::vector<unsigned char> data = bound(blob_label, root, peer, header);
  std::vector<unsigned char> sealed(seal_nonce_bytes + blob.size() + seal_overhead_bytes);
  randombytes_buf(sealed.data(), seal_nonce_bytes);
  unsigned long long length = 0;
  crypto_aead_xchacha20poly1305_ietf_encrypt(sealed.data() + seal_nonce_bytes, &length, blob.data(), blob.size(),
                                             data.data(), data.size(), nullptr, sealed.data(), keys.seal());
  return sealed;
}

std::optional<std::vector<unsigned char>> open_blob(const RendezvousSecret::Keys& keys, const Challenge& root,
                                                    const Challenge& peer, std::span<const unsigned char> header,
                                                    std::span<const unsigned char> sealed) {
  if (sealed.size() < seal_nonce_bytes + seal_overhead_bytes) return std::nullopt;
  const std::vector<unsigned char> data = bound(blob_label, root, peer, header);
  std::vector<unsigned char> blob(sealed.size() - seal_nonce_bytes - seal_overhead_bytes);
  unsigned long long length = 0;
  if (crypto_aead_xchacha20poly1305_ietf_decrypt(blob.data(), &length, nullptr, sealed.data() + seal_nonce_bytes,
                                                 sealed.size() - seal_nonce_bytes, data.data(), data.size(),
                                                 sealed.data(), keys.seal()) != 0) {
    return std::nullopt;
  }
  return blob;
}

}  // namespace detail
}  // namespace loom::comm
