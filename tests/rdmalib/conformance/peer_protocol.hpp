// What the conformance suite and its helper process (peer_main.cpp) say to
// each other. Kept tiny: the point is to exercise rdmalib across processes, not
// to define a protocol.
//
// Setup: the peer presents (or replies with) a PeerHello as private data; the
// test side presents (or replies with) kTestPrivateDataSize pattern bytes.
// Stdout of the peer carries "RDMALIB-PEER PORT <n>" (listen mode, after the
// listener is bound) and "RDMALIB-PEER CONNECTED" (after its receives are
// posted); other stdout lines are ignored.
//
// Messages to the peer start with one command byte:
//   'E' echo the whole message back unchanged;
//   'S' stream: send kStreamMessageSize-byte 'D' messages (8-byte sequence
//       number after the 'D', then pattern bytes) until killed;
//   'Q' close the connection and exit 0.
// A write-with-immediate into the peer's region with imm = n makes the peer
// reply 'M' followed by the first n bytes of its region.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <rdmalib/buffer.hpp>

namespace conformance {

constexpr size_t kPeerRegionSize = 64 * 1024;
constexpr size_t kPeerSlotSize = 128 * 1024;
constexpr size_t kPeerSlots = 8;
constexpr size_t kStreamMessageSize = 1024;
constexpr size_t kTestPrivateDataSize = 40;
constexpr const char *kPeerLinePrefix = "RDMALIB-PEER ";

/// Deterministic, position-dependent bytes (not periodic in 256, so an offset
/// error shows as a mismatch).
inline uint8_t pattern_byte(uint64_t seed, uint64_t i) {
  uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return static_cast<uint8_t>(x);
}

inline void fill_pattern(void *dst, size_t len, uint64_t seed, uint64_t first = 0) {
  auto *p = static_cast<uint8_t *>(dst);
  for (size_t i = 0; i < len; ++i)
    p[i] = pattern_byte(seed, first + i);
}

/// Offset of the first byte that differs from the pattern, or -1.
inline long long pattern_mismatch(const void *src, size_t len, uint64_t seed, uint64_t first = 0) {
  auto *p = static_cast<const uint8_t *>(src);
  for (size_t i = 0; i < len; ++i)
    if (p[i] != pattern_byte(seed, first + i))
      return static_cast<long long>(i);
  return -1;
}

inline std::vector<uint8_t> pattern_vector(size_t len, uint64_t seed) {
  std::vector<uint8_t> v(len);
  fill_pattern(v.data(), len, seed);
  return v;
}

/// The peer's private data: where its region is, plus pattern bytes.
struct PeerHello {
  char magic[8];
  rdmalib::RemoteBuffer region;
  uint8_t fill[16];
};
static_assert(sizeof(PeerHello) == 48, "PeerHello must be 48 bytes of private data");

inline PeerHello make_hello(const rdmalib::RemoteBuffer &region, uint64_t seed) {
  PeerHello h{};
  std::memcpy(h.magic, "RFPEER1", 8);
  h.region = region;
  fill_pattern(h.fill, sizeof h.fill, seed + 77);
  return h;
}

inline bool hello_valid(const PeerHello &h, uint64_t seed) {
  return std::memcmp(h.magic, "RFPEER1", 8) == 0 &&
         pattern_mismatch(h.fill, sizeof h.fill, seed + 77) < 0;
}

/// What the test side sends as private data to a peer with this seed.
inline std::vector<uint8_t> test_private_data(uint64_t seed) {
  return pattern_vector(kTestPrivateDataSize, seed + 1000);
}

} // namespace conformance
