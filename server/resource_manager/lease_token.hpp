// Lease tokens: how an executor manager checks, on its own, that a client
// holds a lease the resource manager granted on this node.
//
// The resource manager and each executor manager share a node secret. The
// token is a keyed BLAKE2b (libsodium crypto_generichash) with a 16-byte
// output, the size of the token field ClientHello carries, computed over the
// lease's fields in a fixed, length-prefixed encoding. A node that knows its
// secret recomputes it from the fields the client presents; nothing is asked
// of the resource manager, so granting a lease costs the client one round trip.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/hex.hpp"
#include "resource_manager/owner.hpp"

namespace rfaas::rm {

/// Bytes of a token: the wire protocol's kTokenSize (ClientHello::token).
constexpr size_t kLeaseTokenSize = 16;
/// Bytes of a node secret (crypto_generichash_KEYBYTES).
constexpr size_t kNodeSecretSize = 32;

using LeaseToken = std::array<uint8_t, kLeaseTokenSize>;
using NodeSecret = std::array<uint8_t, kNodeSecretSize>;

/// What a token covers: one node's share of one lease.
struct LeaseClaim {
  uint64_t lease_id = 0;
  std::string node;
  uint32_t cores = 0;
  uint64_t memory_mib = 0;
  /// Milliseconds since the Unix epoch (wall clock: the resource manager and
  /// the node compare it on different machines, and it survives restarts).
  uint64_t expiry_ms = 0;
  /// Who the lease was granted to.
  std::string client;
  /// The uid the resource manager authenticated (kAnonymousOwner: none).
  uint32_t owner_uid = kAnonymousOwner;
};

/// Initialises libsodium once; throws std::runtime_error if it cannot.
void ensure_sodium();

/// A fresh random node secret (a ChaCha20 stream keyed from libsodium's
/// randombytes, erasing its keys as it goes).
NodeSecret generate_secret();
/// A fresh lease id in 1..2^53-1 (0 means "no lease" on the wire; the bound
/// keeps ids exact in JSON clients). Ids rise with the wall clock (the
/// milliseconds since 2024 above 12 random bits, and above the last id this
/// process gave), so the database's lease, part and accounting rows of
/// consecutive leases share B-tree pages: with random ids every grant
/// dirtied pages of its own and each commit wrote back several per lease.
/// Ids are names, not secrets (the lease secret and the tokens are).
/// The id is also above `above`: the highest id a database holds, so that
/// a clock set back since it was written cannot repeat one. Only after
/// 2^53-1 do ids start again from 1, and the caller must then check them.
uint64_t generate_lease_id(uint64_t above = 0);

/// Bytes of a lease secret (LeaseGrant::secret on the wire) and of the hash
/// the resource manager keeps of it.
constexpr size_t kLeaseSecretSize = 16;
constexpr size_t kLeaseSecretHashSize = 32;
using LeaseSecret = std::array<uint8_t, kLeaseSecretSize>;
using LeaseSecretHash = std::array<uint8_t, kLeaseSecretHashSize>;

/// A fresh random lease secret: only the client a lease is granted to
/// receives it, and renewing or releasing the lease needs it.
LeaseSecret generate_lease_secret();
/// What the resource manager stores instead of the secret (BLAKE2b under a
/// domain tag): a copy of its database does not let anyone renew a lease.
LeaseSecretHash hash_lease_secret(const LeaseSecret &secret);
/// Constant-time check of `secret` against a stored hash; false for an
/// all-zero hash (a lease recorded before lease secrets existed).
bool lease_secret_matches(const LeaseSecret &secret, const LeaseSecretHash &hash);

/// The token of `claim` under `secret`.
LeaseToken compute_token(const LeaseClaim &claim, const NodeSecret &secret);

/// What a node signs when it registers (NodeRegister on the wire).
struct RegistrationClaim {
  std::string node;
  std::string address;
  uint32_t cores = 0;
  uint64_t memory_mib = 0;
  /// Wall clock of the node when it signed (milliseconds since the epoch).
  uint64_t timestamp_ms = 0;
};

/// The proof a node presents instead of its secret: a keyed BLAKE2b of the
/// registration's fields under the node secret (another domain tag than lease
/// tokens, so neither can stand in for the other). Whoever sees it on the wire
/// learns nothing of the secret and cannot sign other fields or a later time.
LeaseToken registration_proof(const RegistrationClaim &claim, const NodeSecret &secret);
/// Constant-time check of a registration proof.
bool verify_registration(const RegistrationClaim &claim, const LeaseToken &proof,
                         const NodeSecret &secret);

/// Reads a node secret file: its first line holds 64 hex digits (create one
/// with `openssl rand -hex 32 > node.secret` or `head -c 32 /dev/urandom | xxd -p -c 32`).
/// Throws std::runtime_error naming the file and what is wrong.
NodeSecret read_secret_file(const std::string &path);

/// Lower-case hex of a token or secret, and back (common/hex.hpp). from_hex
/// returns false on a wrong length or a non-hex character.
using server::from_hex;
using server::to_hex;
template <size_t N> std::string to_hex(const std::array<uint8_t, N> &a) {
  return to_hex(a.data(), N);
}
template <size_t N> bool from_hex(const std::string &text, std::array<uint8_t, N> &out) {
  return from_hex(text, out.data(), N);
}

/// Why a token was refused. Each has its own text (reason_text) so that an
/// operator reading a node's log knows which one.
enum class TokenVerdict {
  Ok,
  Forged,   ///< the MAC does not match the fields (or the secret differs)
  Expired,  ///< the lease's expiry has passed
  Foreign,  ///< the lease names another node
  Replayed, ///< this lease already ended on this node
};
const char *reason_text(TokenVerdict v);

/// The node's side: verifies tokens with this node's name and secret, and
/// remembers which leases ended here so that their tokens cannot be reused.
/// Not thread-safe: one per executor manager loop.
class TokenVerifier {
public:
  /// `retention_ms`: how long a lease this node ended on its own (its
  /// expiry passed by this node's clock) is remembered. A renewal may have
  /// been granted without reaching this node, so the latest expiry of the
  /// lease's tokens is not known here; the retention should exceed the
  /// longest lease the resource manager grants (its max_duration_ms).
  TokenVerifier(std::string node, const NodeSecret &secret,
                uint64_t retention_ms = 24ull * 3600 * 1000);

  /// Checks in this order: foreign, forged, replayed, expired. Comparison of
  /// the MAC is constant-time.
  TokenVerdict verify(const LeaseClaim &claim, const LeaseToken &token, uint64_t now_ms) const;

  /// Lease `lease_id` ended on this node (released, expired or revoked): its
  /// token is refused as replayed from now on. `tokens_until_ms` is the
  /// latest expiry any token of the lease carried, as the resource manager
  /// tells it (LeaseEnded::expiry_ms): the entry is kept until then, since
  /// every token of the lease is refused as expired afterwards. That is the
  /// resource manager's word, which issued every token: it replaces a date
  /// the node guessed (a lease the node ended by its own clock, which is
  /// what most expiring leases are, is not kept a day once the resource
  /// manager's notice comes). 0: not known (the node ended the lease itself,
  /// or the resource manager does not know): kept for the retention from now.
  /// Returns the date the entry is now kept until when this call changed it
  /// (a first notice, the resource manager's word on a guess, a later
  /// token), else 0: a node writes the entry down only then, and takes a
  /// notice told again (a registration repeats the ends a node may have
  /// missed) with one look-up.
  uint64_t mark_ended(uint64_t lease_id, uint64_t tokens_until_ms, uint64_t now_ms);
  /// As mark_ended with a date the node chose (read back from its file of
  /// ended leases): kept until at least `until_ms`, and the resource
  /// manager's word still replaces it.
  uint64_t keep_ended_until(uint64_t lease_id, uint64_t until_ms, uint64_t now_ms);

  /// Leases remembered as ended (for tests and metrics).
  size_t ended_count() const { return ended_.size(); }
  /// Entries looked at while forgetting old ones, over this verifier's life
  /// (for tests: each notice costs O(log n), not a scan of every entry).
  uint64_t prune_steps() const { return prune_steps_; }
  const std::string &node() const { return node_; }

private:
  struct Kept {
    uint64_t until = 0; ///< forget after (ms)
    bool told = false;  ///< the resource manager's date, not a guess
  };
  uint64_t keep(uint64_t lease_id, uint64_t until_ms, bool told, uint64_t now_ms);
  void prune(uint64_t now_ms);

  std::string node_;
  NodeSecret secret_;
  uint64_t retention_ms_;
  std::unordered_map<uint64_t, Kept> ended_;
  /// (forget after, lease id), soonest first: pruning takes only what is
  /// due. An ordered set rather than a heap: a date moves earlier when the
  /// resource manager's word replaces a guess, and a heap would hold the
  /// old entry for the rest of the retention.
  std::set<std::pair<uint64_t, uint64_t>> forget_;
  uint64_t prune_steps_ = 0;
};

} // namespace rfaas::rm
