// The cryptography of the authenticated TCP rendezvous (protocol 2), apart from its sockets:
// challenges, the ranks' answers and rank 0's sealed blob, all with libsodium.
//
//   rank 0 -> peer: header(size, 0) + rank 0's challenge (32 random bytes)
//   peer -> rank 0: header(size, rank) + the peer's challenge + HMAC-SHA-512-256 under the auth key
//                   over "loom rendezvous answer" | rank 0's challenge | the peer's | its header
//   rank 0 -> peer: header(size, blob bytes) + nonce + XChaCha20-Poly1305 of the blob under the
//                   seal key, with "loom rendezvous blob" | both challenges | this header as data;
//                   or header(size, refused) and the connection closed.
// A fresh challenge per connection makes a recorded answer worthless; the peer's challenge in the
// sealed reply makes a recorded reply worthless to a rank.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "loom/comm/rendezvous.hpp"

namespace loom::comm {

struct RendezvousSecret::Keys {
  unsigned char* memory = nullptr;  // sodium_malloc'd: auth key, then seal key
  const unsigned char* auth() const { return memory; }
  const unsigned char* seal() const { return memory + 32; }
};

namespace detail {

inline constexpr std::size_t challenge_bytes = 32;
inline constexpr std::size_t answer_tag_bytes = 32;      // crypto_auth_BYTES
inline constexpr std::size_t seal_nonce_bytes = 24;      // crypto_aead_xchacha20poly1305_ietf_NPUBBYTES
inline constexpr std::size_t seal_overhead_bytes = 16;   // crypto_aead_xchacha20poly1305_ietf_ABYTES
inline constexpr std::uint32_t refused_marker = 0xFFFFFFFF;  // a reply header's last word: refused
using Challenge = std::array<unsigned char, challenge_bytes>;
using Tag = std::array<unsigned char, answer_tag_bytes>;

Challenge fresh_challenge();
Tag answer_tag(const RendezvousSecret::Keys& keys, const Challenge& root, const Challenge& peer,
               std::span<const unsigned char> header);
bool answer_holds(const RendezvousSecret::Keys& keys, const Challenge& root, const Challenge& peer,
                  std::span<const unsigned char> header, const Tag& tag);
// nonce | ciphertext of blob (with its tag)
std::vector<unsigned char> seal_blob(const RendezvousSecret::Keys& keys, const Challenge& root, const Challenge& peer,
                                     std::span<const unsigned char> header, std::span<const unsigned char> blob);
// The blob, or none when `sealed` does not authenticate.
std::optional<std::vector<unsigned char>> open_blob(const RendezvousSecret::Keys& keys, const Challenge& root,
                                                    const Challenge& peer, std::span<const unsigned char> header,
                                                    std::span<const unsigned char> sealed);

}  // namespace detail
}  // namespace loom::comm
