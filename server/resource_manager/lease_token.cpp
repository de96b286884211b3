#include "resource_manager/lease_token.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string_view>

#include <sodium.h>

namespace rfaas::rm {

static_assert(kNodeSecretSize == crypto_generichash_KEYBYTES, "node secret is a BLAKE2b key");
static_assert(kLeaseTokenSize >= crypto_generichash_BYTES_MIN &&
                  kLeaseTokenSize <= crypto_generichash_BYTES_MAX,
              "BLAKE2b can produce a token of this size");

void ensure_sodium() {
  // sodium_init is idempotent and thread-safe; < 0 means no entropy source.
  if (sodium_init() < 0)
    throw std::runtime_error("libsodium could not be initialised (no entropy source?)");
}

namespace {

/// Random bytes without a system call each: libsodium's randombytes_buf
/// asks the kernel (getrandom) on every call, two of them per grant, about
/// half a microsecond of a lease. A ChaCha20 key from randombytes, once per
/// thread, generates a block at a time; the block's first 32 bytes become
/// the next key ("fast key erasure"), and every byte handed out or used as
/// a key is wiped, so memory read later reveals nothing given out before.
/// The resource manager's children (the slurm CLI) exec at once and never
/// draw from it, so a fork does not repeat its stream.
class KeyErasingRandom {
public:
  void fill(unsigned char *out, size_t n) {
    while (n > 0) {
      if (pos_ == sizeof block_)
        refill();
      const size_t k = std::min(n, sizeof block_ - pos_);
      std::memcpy(out, block_ + pos_, k);
      sodium_memzero(block_ + pos_, k);
      pos_ += k;
      out += k;
      n -= k;
    }
  }
  ~KeyErasingRandom() {
    sodium_memzero(key_, sizeof key_);
    sodium_memzero(block_, sizeof block_);
  }

private:
  void refill() {
    if (!seeded_) {
      randombytes_buf(key_, sizeof key_);
      seeded_ = true;
    }
    // A key is used for one block only, so a fixed nonce never repeats a
    // (key, nonce) pair.
    static const unsigned char kNonce[crypto_stream_chacha20_NONCEBYTES] = {};
    crypto_stream_chacha20(block_, sizeof block_, kNonce, key_);
    std::memcpy(key_, block_, sizeof key_);
    sodium_memzero(block_, sizeof key_);
    pos_ = sizeof key_;
  }

  unsigned char key_[crypto_stream_chacha20_KEYBYTES];
  unsigned char block_[1024];
  size_t pos_ = sizeof block_;
  bool seeded_ = false;
};

void random_bytes(void *out, size_t n) {
  thread_local KeyErasingRandom rng;
  rng.fill(static_cast<unsigned char *>(out), n);
}

} // namespace

NodeSecret generate_secret() {
  ensure_sodium();
  NodeSecret s;
  random_bytes(s.data(), s.size());
  return s;
}

uint64_t generate_lease_id(uint64_t above) {
  ensure_sodium();
  // 2024-01-01T00:00:00Z: 41 bits of milliseconds from it last until 2093,
  // which with 12 bits below stays within the 53 bits JSON keeps exact.
  constexpr int64_t kEpochMs = 1'704'067'200'000;
  constexpr int kLowBits = 12;
  constexpr uint64_t kMax = (1ull << 53) - 1;
  static std::atomic<uint64_t> last{0};
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  uint16_t low = 0;
  random_bytes(&low, sizeof low);
  const uint64_t since = static_cast<uint64_t>(std::max<int64_t>(now_ms - kEpochMs, 0));
  uint64_t id = ((since << kLowBits) | (low & ((1u << kLowBits) - 1))) & kMax;
  uint64_t prev = last.load(std::memory_order_relaxed);
  uint64_t next;
  do {
    next = std::max({id, prev + 1, above + 1});
    if (next > kMax || next == 0)
      next = 1;
  } while (!last.compare_exchange_weak(prev, next, std::memory_order_relaxed));
  return next;
}

LeaseSecret generate_lease_secret() {
  ensure_sodium();
  LeaseSecret s;
  random_bytes(s.data(), s.size());
  return s;
}

LeaseSecretHash hash_lease_secret(const LeaseSecret &secret) {
  ensure_sodium();
  static constexpr char kTag[] = "rfaas-lease-secret-v1";
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, kLeaseSecretHashSize);
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char *>(kTag), sizeof kTag - 1);
  crypto_generichash_update(&st, secret.data(), secret.size());
  LeaseSecretHash h;
  crypto_generichash_final(&st, h.data(), h.size());
  return h;
}

bool lease_secret_matches(const LeaseSecret &secret, const LeaseSecretHash &hash) {
  if (sodium_is_zero(hash.data(), hash.size()))
    return false;
  LeaseSecretHash given = hash_lease_secret(secret);
  return sodium_memcmp(given.data(), hash.data(), hash.size()) == 0;
}

namespace {

// Fixed encoding: a domain tag, then each field little-endian, strings with
// their length first, so that no two different claims encode the same bytes.
void put_u64(crypto_generichash_state &st, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i)
    b[i] = static_cast<uint8_t>(v >> (8 * i));
  crypto_generichash_update(&st, b, sizeof b);
}
void put_str(crypto_generichash_state &st, std::string_view s) {
  put_u64(st, s.size());
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char *>(s.data()), s.size());
}

} // namespace

LeaseToken compute_token(const LeaseClaim &claim, const NodeSecret &secret) {
  ensure_sodium();
  crypto_generichash_state st;
  crypto_generichash_init(&st, secret.data(), secret.size(), kLeaseTokenSize);
  // v2: the owner's uid joined the fields (a node runs the lease's
  // executors as that uid, so a client must not be able to change it).
  put_str(st, "rfaas-lease-token-v2");
  put_u64(st, claim.lease_id);
  put_str(st, claim.node);
  put_u64(st, claim.cores);
  put_u64(st, claim.memory_mib);
  put_u64(st, claim.expiry_ms);
  put_str(st, claim.client);
  put_u64(st, claim.owner_uid);
  LeaseToken t;
  crypto_generichash_final(&st, t.data(), t.size());
  sodium_memzero(&st, sizeof st);
  return t;
}

LeaseToken registration_proof(const RegistrationClaim &claim, const NodeSecret &secret) {
  ensure_sodium();
  crypto_generichash_state st;
  crypto_generichash_init(&st, secret.data(), secret.size(), kLeaseTokenSize);
  put_str(st, "rfaas-node-registration-v1");
  put_str(st, claim.node);
  put_str(st, claim.address);
  put_u64(st, claim.cores);
  put_u64(st, claim.memory_mib);
  put_u64(st, claim.timestamp_ms);
  LeaseToken t;
  crypto_generichash_final(&st, t.data(), t.size());
  sodium_memzero(&st, sizeof st);
  return t;
}

bool verify_registration(const RegistrationClaim &claim, const LeaseToken &proof,
                         const NodeSecret &secret) {
  LeaseToken expected = registration_proof(claim, secret);
  return sodium_memcmp(expected.data(), proof.data(), kLeaseTokenSize) == 0;
}

NodeSecret read_secret_file(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("cannot read the node secret file " + path + ": " +
                             std::strerror(errno));
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
    line.pop_back();
  NodeSecret secret;
  if (!from_hex(line, secret))
    throw std::runtime_error("the node secret file " + path +
                             " must hold 64 hex digits on its "
                             "first line (create it with: openssl rand -hex 32 > " +
                             path + ")");
  return secret;
}

const char *reason_text(TokenVerdict v) {
  switch (v) {
  case TokenVerdict::Ok:
    return "ok";
  case TokenVerdict::Forged:
    return "lease_invalid: token does not match the lease (forged, altered, or issued for "
           "another node secret)";
  case TokenVerdict::Expired:
    return "lease_invalid: lease expired (renew it with the resource manager)";
  case TokenVerdict::Foreign:
    return "lease_invalid: lease was granted for another node";
  case TokenVerdict::Replayed:
    return "lease_invalid: lease already ended on this node (replayed token)";
  }
  return "lease_invalid: unknown reason";
}

TokenVerifier::TokenVerifier(std::string node, const NodeSecret &secret, uint64_t retention_ms)
    : node_(std::move(node)), secret_(secret), retention_ms_(retention_ms) {
  ensure_sodium();
}

TokenVerdict TokenVerifier::verify(const LeaseClaim &claim, const LeaseToken &token,
                                   uint64_t now_ms) const {
  if (claim.node != node_)
    return TokenVerdict::Foreign;
  LeaseToken expected = compute_token(claim, secret_);
  if (sodium_memcmp(expected.data(), token.data(), kLeaseTokenSize) != 0)
    return TokenVerdict::Forged;
  if (ended_.count(claim.lease_id))
    return TokenVerdict::Replayed;
  if (claim.expiry_ms <= now_ms)
    return TokenVerdict::Expired;
  return TokenVerdict::Ok;
}

uint64_t TokenVerifier::mark_ended(uint64_t lease_id, uint64_t tokens_until_ms, uint64_t now_ms) {
  if (tokens_until_ms != 0)
    return keep(lease_id, tokens_until_ms, true, now_ms);
  return keep(lease_id, now_ms + retention_ms_, false, now_ms);
}

uint64_t TokenVerifier::keep_ended_until(uint64_t lease_id, uint64_t until_ms, uint64_t now_ms) {
  return keep(lease_id, until_ms, false, now_ms);
}

uint64_t TokenVerifier::keep(uint64_t lease_id, uint64_t until_ms, bool told, uint64_t now_ms) {
  prune(now_ms);
  auto [it, fresh] = ended_.try_emplace(lease_id, Kept{until_ms, told});
  if (!fresh) {
    Kept &k = it->second;
    // The later of two dates of the same kind; the resource manager's over
    // a guess, earlier or not; never a guess over the resource manager's.
    const bool replace = told == k.told ? until_ms > k.until : told;
    if (!replace)
      return 0;
    forget_.erase({k.until, lease_id});
    k = Kept{until_ms, told};
  }
  forget_.emplace(until_ms, lease_id);
  return until_ms;
}

void TokenVerifier::prune(uint64_t now_ms) {
  while (!forget_.empty() && forget_.begin()->first <= now_ms) {
    ++prune_steps_;
    ended_.erase(forget_.begin()->second);
    forget_.erase(forget_.begin());
  }
}

} // namespace rfaas::rm
