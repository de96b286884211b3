// The resource-manager messages of the rFaaS wire protocol (version 7): what
// executor managers (nodes) and clients say to the resource manager, and what
// a client shows an executor manager to prove its lease.
//
// Same rules as protocol.hpp (fixed little-endian layouts, validate() on
// encode and decode, never throwing, never allocating except the LeaseGrant
// overloads that fill a std::vector). Every message but a LeaseGrant with its
// parts fits kControlMessageMax; a LeaseGrant with kMaxLeaseNodes parts fits
// kMaxLeaseGrantSize, which is what a client's receive slots must hold.
// docs/protocol.md ("Resource manager") explains the exchanges and the threat
// model of the node secret.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "protocol/protocol.hpp"

namespace rfaas::protocol {

/// Most nodes one lease may span (LeaseRequest::max_nodes, LeaseGrant::parts).
constexpr uint32_t kMaxLeaseNodes = 16;
/// Capacity of a node's address as clients reach it ("host:port" or the
/// provider's printable address), NUL-terminated.
constexpr size_t kNodeAddressCapacity = 128;
/// Capacity of a MUNGE credential (LeaseRequest::credential), NUL-terminated.
/// A credential is base64 text; one over lease_request_binding() plus a
/// SLURM job id takes about 310 bytes with MUNGE's default cipher and MAC.
constexpr size_t kCredentialCapacity = 416;
/// LeaseGrantPart::owner_uid and LeaseProof::owner_uid of a lease whose client
/// was not authenticated (the resource manager's auth "none"): no uid is
/// known, and the node runs its executors as its configured executor.user.
constexpr uint32_t kAnonymousUid = 0xffffffffu;

/// Why a lease ended (LeaseEnded::why).
enum class LeaseEndReason : uint16_t {
  Released = 0, ///< the client released it
  Expired = 1,  ///< not renewed in time
  Revoked = 2,  ///< an operator revoked it (or removed its node)
  NodeDown = 3, ///< a node it held cores on went down
  /// Not an end: the lease was renewed and lives until the notice's
  /// expiry_ms. The node ends the lease's allocations at the latest expiry
  /// it knows, on its own clock, so it must hear of renewals.
  Renewed = 4,
};
constexpr uint16_t kMaxLeaseEndReason = 4;
const char *to_string(LeaseEndReason r) noexcept;

/// Node -> resource manager, first message on the node's connection, and again
/// after every reconnect. `proof` is registration_proof() of the fields under
/// the node's secret (a keyed MAC; the secret itself never travels), and
/// `timestamp_ms` (wall clock) keeps an old registration from being replayed.
struct NodeRegister {
  static constexpr MessageType kType = MessageType::NodeRegister;
  static constexpr const char *kName = "NodeRegister";
  Header header{kMagic, kVersion, kType};
  uint32_t cores = 0;
  Reserved<uint32_t> reserved0;
  uint64_t memory_mib = 0;
  /// Milliseconds since the Unix epoch when the node signed this message.
  uint64_t timestamp_ms = 0;
  Token proof;
  char node[kNameCapacity] = {};
  char address[kNodeAddressCapacity] = {};

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.header);
    f(s.cores);
    f(s.reserved0);
    f(s.memory_mib);
    f(s.timestamp_ms);
    f(s.proof);
    f(s.node);
    f(s.address);
  }
  WireResult validate() const noexcept;
};

/// Resource manager -> node, answering NodeRegister. On a non-Ok status
/// (lease_invalid: unknown node or a wrong proof; bad_request) the resource
/// manager closes the connection after it.
struct NodeRegistered {
  static constexpr MessageType kType = MessageType::NodeRegistered;
  static constexpr const char *kName = "NodeRegistered";
  Header header{kMagic, kVersion, kType};
  ErrorCode status = ErrorCode::Ok;
  Reserved<uint16_t> reserved0;
  /// How often the node should send Heartbeat.
  uint32_t heartbeat_ms = 0;
  /// The resource manager's wall clock when it answered (nodes may log skew:
  /// tokens carry wall-clock expiries).
  uint64_t now_ms = 0;
  char message[kMessageCapacity] = {};

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.header);
    f(s.status);
    f(s.reserved0);
    f(s.heartbeat_ms);
    f(s.now_ms);
    f(s.message);
  }
  WireResult validate() const noexcept;
};

/// Node -> resource manager, every NodeRegistered::heartbeat_ms. No reply.
struct Heartbeat {
  static constexpr MessageType kType = MessageType::Heartbeat;
  static constexpr const char *kName = "Heartbeat";
  Header header{kMagic, kVersion, kType};
  uint64_t sequence = 0;
  /// Allocations the node is serving (for the operator's view).
  uint32_t allocations = 0;
  Reserved<uint32_t> reserved0;

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.header);
    f(s.sequence);
    f(s.allocations);
    f(s.reserved0);
  }
  WireResult validate() const noexcept { return {}; }
};

/// Client -> resource manager: lease `cores` cores and `memory_mib` MiB (in
/// total) for `duration_ms` (0: the default), on at most `max_nodes` nodes.
/// Answered by a LeaseGrant.
struct LeaseRequest {
  static constexpr MessageType kType = MessageType::LeaseRequest;
  static constexpr const char *kName = "LeaseRequest";
  Header header{kMagic, kVersion, kType};
  uint32_t cores = 0;
  uint32_t max_nodes = 1;
  uint64_t memory_mib = 0;
  uint64_t duration_ms = 0;
  /// Who asks, as the client names itself (for accounting and logs); the
  /// authenticated identity is the credential's uid.
  char client[kNameCapacity] = {};
  /// A MUNGE credential (base64 text, NUL-terminated) whose payload is
  /// lease_request_binding() of this request followed by the client's SLURM
  /// job id (empty outside a job); all zero when the client has none (no
  /// munged reachable). A resource manager with auth "munge" refuses a
  /// request without a valid one.
  char credential[kCredentialCapacity] = {};

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.header);
    f(s.cores);
    f(s.max_nodes);
    f(s.memory_mib);
    f(s.duration_ms);
    f(s.client);
    f(s.credential);
  }
  WireResult validate() const noexcept;
};

/// What a LeaseRequest's credential must carry at the start of its payload:
/// a tag and the request's fields (the credential excluded) in their wire
/// encoding. A credential is thus bound to one request and cannot be moved
/// to another with more cores or another client name. The client's SLURM
/// job id, if any, follows it in the payload.
std::vector<uint8_t> lease_request_binding(const LeaseRequest &m);

/// Client -> resource manager: extend lease `lease_id` to now + duration_ms
/// (0: the default). Answered by a LeaseGrant with new tokens.
struct LeaseRenew {
  static constexpr MessageType kType = MessageType::LeaseRenew;
  static constexpr const char *kName = "LeaseRenew";
  Header header{kMagic, kVersion, kType};
  uint64_t lease_id = 0;
  uint64_t duration_ms = 0;
  /// The lease's secret (LeaseGrant::secret of its grant): the lease id and
  /// the client name are not enough to renew someone else's lease.
  Token secret;
  /// Must name the client the lease was granted to.
  char client[kNameCapacity] = {};

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.header);
    f(s.lease_id);
    f(s.duration_ms);
    f(s.secret);
    f(s.client);
  }
  WireResult validate() const noexcept;
};

/// Client -> resource manager: end lease `lease_id` now. Answered by a
/// LeaseGrant without parts (status ok, or why not).
struct LeaseRelease {
  static constexpr MessageType kType = MessageType::LeaseRelease;
  static constexpr const char *kName = "LeaseRelease";
  Header header{kMagic, kVersion, kType};
  uint64_t lease_id = 0;
  /// The lease's secret, as for LeaseRenew.
  Token secret;
  char client[kNameCapacity] = {};

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.header);
    f(s.lease_id);
    f(s.secret);
    f(s.client);
  }
  WireResult validate() const noexcept;
};

/// One node's share of a granted lease, following a LeaseGrant on the wire.
struct LeaseGrantPart {
  uint32_t cores = 0;
  /// The uid the resource manager authenticated for the lease
  /// (kAnonymousUid without authentication); the token covers it, and the
  /// client repeats it in LeaseProof::owner_uid.
  uint32_t owner_uid = kAnonymousUid;
  uint64_t memory_mib = 0;
  /// What the client presents to this node (LeaseProof::token).
  Token token;
  char node[kNameCapacity] = {};
  char address[kNodeAddressCapacity] = {};

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.cores);
    f(s.owner_uid);
    f(s.memory_mib);
    f(s.token);
    f(s.node);
    f(s.address);
  }
  WireResult validate() const noexcept;
};

/// Resource manager -> client, answering LeaseRequest, LeaseRenew and
/// LeaseRelease. Status ok: `parts` LeaseGrantParts follow (none for a
/// release). Otherwise parts is 0 and `message` says why
/// (resources_unavailable, lease_invalid, bad_request, internal).
/// Encode and decode it with the overloads that take the parts.
struct LeaseGrant {
  static constexpr MessageType kType = MessageType::LeaseGrant;
  static constexpr const char *kName = "LeaseGrant";
  Header header{kMagic, kVersion, kType};
  ErrorCode status = ErrorCode::Ok;
  Reserved<uint16_t> reserved0;
  uint32_t parts = 0;
  uint64_t lease_id = 0;
  /// Milliseconds since the Unix epoch. With status Provisioning instead:
  /// how many milliseconds the client should wait before it asks again.
  uint64_t expiry_ms = 0;
  /// Answering a LeaseRequest: the lease's secret, 128 random bits that only
  /// the client holding this grant knows; LeaseRenew and LeaseRelease must
  /// present it. Zero in every other answer (a renewal keeps the secret).
  Token secret;
  char message[kMessageCapacity] = {};

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.header);
    f(s.status);
    f(s.reserved0);
    f(s.parts);
    f(s.lease_id);
    f(s.expiry_ms);
    f(s.secret);
    f(s.message);
  }
  WireResult validate() const noexcept;
  uint64_t trailing_bytes() const noexcept;
};

/// Resource manager -> node: lease `lease_id` ended; end its executors and
/// refuse its token from now on (a replay). With `why` Renewed it did not
/// end: its executors may run until the new `expiry_ms`.
struct LeaseEnded {
  static constexpr MessageType kType = MessageType::LeaseEnded;
  static constexpr const char *kName = "LeaseEnded";
  Header header{kMagic, kVersion, kType};
  uint64_t lease_id = 0;
  /// Milliseconds since the Unix epoch. With `why` Renewed: the lease's new
  /// expiry. For an end (since version 8): the latest expiry any token of
  /// the lease carried, which a shortening renewal leaves above the lease's
  /// last expiry; the node refuses the lease's tokens as replays until then
  /// and may forget the end afterwards. 0: the resource manager does not
  /// know it (a lease it recorded before version 8); the node keeps the end
  /// for its own retention.
  uint64_t expiry_ms = 0;
  LeaseEndReason why = LeaseEndReason::Released;
  Reserved<uint16_t> reserved0;
  Reserved<uint32_t> reserved1;

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.header);
    f(s.lease_id);
    f(s.expiry_ms);
    f(s.why);
    f(s.reserved0);
    f(s.reserved1);
  }
  WireResult validate() const noexcept;
};

/// One lease's end in a LeasesEnded: LeaseEnded without its header.
struct LeaseEndedEntry {
  uint64_t lease_id = 0;
  uint64_t expiry_ms = 0; ///< as LeaseEnded::expiry_ms

  LeaseEndReason why = LeaseEndReason::Released;
  Reserved<uint16_t> reserved0;
  Reserved<uint32_t> reserved1;

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.lease_id);
    f(s.expiry_ms);
    f(s.why);
    f(s.reserved0);
    f(s.reserved1);
  }
  WireResult validate() const noexcept;
};

/// Most entries one LeasesEnded carries. Sized so that the message fits the
/// resource manager's send area (kMaxLeaseGrantSize): a node's receive
/// slots hold kMaxLeasesEndedSize bytes.
constexpr uint32_t kMaxLeasesEndedEntries = 128;

/// Resource manager -> node: `count` LeaseEnded notices at once, each a
/// LeaseEndedEntry following this header, in the order the leases ended.
/// A node takes it as `count` LeaseEnded messages. The resource manager
/// keeps one message in flight per node and sends what ended meanwhile in
/// the next, so a node keeps up with leases ending thousands of times a
/// second while reading a few messages per pass of its loop.
/// Encode and decode it with the overloads that take the notices.
struct LeasesEnded {
  static constexpr MessageType kType = MessageType::LeasesEnded;
  static constexpr const char *kName = "LeasesEnded";
  Header header{kMagic, kVersion, kType};
  uint32_t count = 0;
  Reserved<uint32_t> reserved0;

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.header);
    f(s.count);
    f(s.reserved0);
  }
  WireResult validate() const noexcept;
  uint64_t trailing_bytes() const noexcept;
};

/// Node -> resource manager: what its part of lease `lease_id` used so far
/// (totals, a later report supersedes an earlier one); `final` at the end.
struct AccountingReport {
  static constexpr MessageType kType = MessageType::AccountingReport;
  static constexpr const char *kName = "AccountingReport";
  Header header{kMagic, kVersion, kType};
  uint64_t lease_id = 0;
  uint64_t allocation_us = 0;
  uint64_t hot_polling_us = 0;
  uint64_t execution_us = 0;
  uint64_t memory_mib = 0;
  /// 1 for the report at the lease's end, 0 for a periodic one.
  uint32_t final = 0;
  Reserved<uint32_t> reserved0;

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.header);
    f(s.lease_id);
    f(s.allocation_us);
    f(s.hot_polling_us);
    f(s.execution_us);
    f(s.memory_mib);
    f(s.final);
    f(s.reserved0);
  }
  WireResult validate() const noexcept;
};

/// Client -> executor manager, the first message on a ClientHello connection
/// when the manager works with a resource manager: the lease's fields that
/// the token covers (ClientHello, limited to 32 bytes of private data, has
/// room only for the id and the token). The manager recomputes the token from
/// them and its node secret; a mismatch, another node's lease, an expired or
/// an ended lease is refused with lease_invalid.
struct LeaseProof {
  static constexpr MessageType kType = MessageType::LeaseProof;
  static constexpr const char *kName = "LeaseProof";
  Header header{kMagic, kVersion, kType};
  uint64_t lease_id = 0;
  uint64_t expiry_ms = 0;
  uint64_t memory_mib = 0;
  uint32_t cores = 0;
  /// LeaseGrantPart::owner_uid of the grant: the token covers it, and a root
  /// executor manager runs the lease's executors as this uid.
  uint32_t owner_uid = kAnonymousUid;
  Token token;
  char client[kNameCapacity] = {};

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.header);
    f(s.lease_id);
    f(s.expiry_ms);
    f(s.memory_mib);
    f(s.cores);
    f(s.owner_uid);
    f(s.token);
    f(s.client);
  }
  WireResult validate() const noexcept;
};

#define RFAAS_WIRE_LAYOUT(T, size)                                                                 \
  static_assert(sizeof(T) == (size), #T " has a fixed wire size");                                 \
  static_assert(std::is_trivially_copyable<T>::value, #T " is a wire type");                       \
  static_assert(std::is_standard_layout<T>::value, #T " is a wire type")
#define RFAAS_WIRE_OFFSET(T, field, off)                                                           \
  static_assert(offsetof(T, field) == (off), #T "." #field " is at byte " #off)

RFAAS_WIRE_LAYOUT(NodeRegister, 240);
RFAAS_WIRE_OFFSET(NodeRegister, cores, 8);
RFAAS_WIRE_OFFSET(NodeRegister, memory_mib, 16);
RFAAS_WIRE_OFFSET(NodeRegister, timestamp_ms, 24);
RFAAS_WIRE_OFFSET(NodeRegister, proof, 32);
RFAAS_WIRE_OFFSET(NodeRegister, node, 48);
RFAAS_WIRE_OFFSET(NodeRegister, address, 112);

RFAAS_WIRE_LAYOUT(NodeRegistered, 152);
RFAAS_WIRE_OFFSET(NodeRegistered, status, 8);
RFAAS_WIRE_OFFSET(NodeRegistered, heartbeat_ms, 12);
RFAAS_WIRE_OFFSET(NodeRegistered, now_ms, 16);
RFAAS_WIRE_OFFSET(NodeRegistered, message, 24);

RFAAS_WIRE_LAYOUT(Heartbeat, 24);
RFAAS_WIRE_OFFSET(Heartbeat, sequence, 8);
RFAAS_WIRE_OFFSET(Heartbeat, allocations, 16);

RFAAS_WIRE_LAYOUT(LeaseRequest, 512);
RFAAS_WIRE_OFFSET(LeaseRequest, cores, 8);
RFAAS_WIRE_OFFSET(LeaseRequest, max_nodes, 12);
RFAAS_WIRE_OFFSET(LeaseRequest, memory_mib, 16);
RFAAS_WIRE_OFFSET(LeaseRequest, duration_ms, 24);
RFAAS_WIRE_OFFSET(LeaseRequest, client, 32);
RFAAS_WIRE_OFFSET(LeaseRequest, credential, 96);

RFAAS_WIRE_LAYOUT(LeaseRenew, 104);
RFAAS_WIRE_OFFSET(LeaseRenew, lease_id, 8);
RFAAS_WIRE_OFFSET(LeaseRenew, duration_ms, 16);
RFAAS_WIRE_OFFSET(LeaseRenew, secret, 24);
RFAAS_WIRE_OFFSET(LeaseRenew, client, 40);

RFAAS_WIRE_LAYOUT(LeaseRelease, 96);
RFAAS_WIRE_OFFSET(LeaseRelease, lease_id, 8);
RFAAS_WIRE_OFFSET(LeaseRelease, secret, 16);
RFAAS_WIRE_OFFSET(LeaseRelease, client, 32);

RFAAS_WIRE_LAYOUT(LeaseGrantPart, 224);
RFAAS_WIRE_OFFSET(LeaseGrantPart, cores, 0);
RFAAS_WIRE_OFFSET(LeaseGrantPart, owner_uid, 4);
RFAAS_WIRE_OFFSET(LeaseGrantPart, memory_mib, 8);
RFAAS_WIRE_OFFSET(LeaseGrantPart, token, 16);
RFAAS_WIRE_OFFSET(LeaseGrantPart, node, 32);
RFAAS_WIRE_OFFSET(LeaseGrantPart, address, 96);

RFAAS_WIRE_LAYOUT(LeaseGrant, 176);
RFAAS_WIRE_OFFSET(LeaseGrant, status, 8);
RFAAS_WIRE_OFFSET(LeaseGrant, parts, 12);
RFAAS_WIRE_OFFSET(LeaseGrant, lease_id, 16);
RFAAS_WIRE_OFFSET(LeaseGrant, expiry_ms, 24);
RFAAS_WIRE_OFFSET(LeaseGrant, secret, 32);
RFAAS_WIRE_OFFSET(LeaseGrant, message, 48);

RFAAS_WIRE_LAYOUT(LeaseEnded, 32);
RFAAS_WIRE_OFFSET(LeaseEnded, lease_id, 8);
RFAAS_WIRE_OFFSET(LeaseEnded, expiry_ms, 16);
RFAAS_WIRE_OFFSET(LeaseEnded, why, 24);

RFAAS_WIRE_LAYOUT(LeaseEndedEntry, 24);
RFAAS_WIRE_OFFSET(LeaseEndedEntry, expiry_ms, 8);
RFAAS_WIRE_OFFSET(LeaseEndedEntry, why, 16);

RFAAS_WIRE_LAYOUT(LeasesEnded, 16);
RFAAS_WIRE_OFFSET(LeasesEnded, count, 8);

RFAAS_WIRE_LAYOUT(AccountingReport, 56);
RFAAS_WIRE_OFFSET(AccountingReport, lease_id, 8);
RFAAS_WIRE_OFFSET(AccountingReport, allocation_us, 16);
RFAAS_WIRE_OFFSET(AccountingReport, hot_polling_us, 24);
RFAAS_WIRE_OFFSET(AccountingReport, execution_us, 32);
RFAAS_WIRE_OFFSET(AccountingReport, memory_mib, 40);
RFAAS_WIRE_OFFSET(AccountingReport, final, 48);

RFAAS_WIRE_LAYOUT(LeaseProof, 120);
RFAAS_WIRE_OFFSET(LeaseProof, lease_id, 8);
RFAAS_WIRE_OFFSET(LeaseProof, expiry_ms, 16);
RFAAS_WIRE_OFFSET(LeaseProof, memory_mib, 24);
RFAAS_WIRE_OFFSET(LeaseProof, cores, 32);
RFAAS_WIRE_OFFSET(LeaseProof, owner_uid, 36);
RFAAS_WIRE_OFFSET(LeaseProof, token, 40);
RFAAS_WIRE_OFFSET(LeaseProof, client, 56);

#undef RFAAS_WIRE_LAYOUT
#undef RFAAS_WIRE_OFFSET

static_assert(sizeof(NodeRegister) <= kControlMessageMax &&
                  sizeof(NodeRegistered) <= kControlMessageMax &&
                  sizeof(LeaseGrant) <= kControlMessageMax &&
                  sizeof(LeaseProof) <= kControlMessageMax,
              "resource-manager messages fit kControlMessageMax");

/// What a resource manager's receive slots must hold: every message a node or
/// a client sends, the LeaseRequest with its credential the largest.
constexpr size_t kMaxResourceManagerRequest = sizeof(LeaseRequest) > kControlMessageMax
                                                  ? sizeof(LeaseRequest)
                                                  : kControlMessageMax;

/// Bytes a LeaseGrant with `parts` parts occupies.
constexpr size_t lease_grant_size(uint32_t parts) noexcept {
  return sizeof(LeaseGrant) + static_cast<size_t>(parts) * sizeof(LeaseGrantPart);
}
/// The largest LeaseGrant: a client's receive slots for the resource manager
/// need this many bytes.
constexpr size_t kMaxLeaseGrantSize = lease_grant_size(kMaxLeaseNodes);

/// Bytes a LeasesEnded with `count` entries occupies.
constexpr size_t leases_ended_size(uint32_t count) noexcept {
  return sizeof(LeasesEnded) + static_cast<size_t>(count) * sizeof(LeaseEndedEntry);
}
/// The largest LeasesEnded: a node's receive slots for the resource manager
/// need this many bytes.
constexpr size_t kMaxLeasesEndedSize = leases_ended_size(kMaxLeasesEndedEntries);
static_assert(kMaxLeasesEndedSize <= kMaxLeaseGrantSize,
              "a LeasesEnded fits the resource manager's send area");

/// Encode a LeasesEnded carrying notices[0, count) (1 <= count <=
/// kMaxLeasesEndedEntries; each must validate as a LeaseEnded).
WireResult encode(const LeaseEnded *notices, size_t count, LeasesEnded &header, void *out,
                  size_t capacity) noexcept;
/// Decode a LeasesEnded into its notices (appended to `notices` as
/// LeaseEnded messages; nothing is appended on failure).
WireResult decode(const void *in, size_t len, LeasesEnded &out, std::vector<LeaseEnded> &notices);

/// Encode a LeaseGrant followed by its parts (parts.size() == m.parts).
WireResult encode(const LeaseGrant &m, const std::vector<LeaseGrantPart> &parts, void *out,
                  size_t capacity) noexcept;
/// Decode a LeaseGrant and its parts (replacing `parts`, left empty on failure).
WireResult decode(const void *in, size_t len, LeaseGrant &out, std::vector<LeaseGrantPart> &parts);

} // namespace rfaas::protocol
