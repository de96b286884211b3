// The rFaaS wire protocol, version 8: every message exchanged by clients,
// executor managers and executors, defined once.
//
// Rules (docs/protocol.md explains the flow and the reasons):
//  * every message starts with Header {magic "RFAS", version, type};
//  * every field is little-endian on the wire, at a fixed offset, with no
//    implicit padding (static_asserts below); the structs are the layout, and
//    encode()/decode() convert field by field, so the code is correct on any
//    host byte order;
//  * decode() never trusts its input: magic, version, type, lengths and limits
//    are checked and a failure comes back as a WireResult naming the field;
//  * encode() and decode() never throw and never allocate (except the
//    AllocationRequest overloads, which fill a std::vector), so workers can use
//    them on the hot path;
//  * reserved fields are written as zero and ignored when read; bytes after a
//    message's end are ignored (connection private data may arrive padded, and
//    slot-resident headers are decoded from the whole slot).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <rdmalib/buffer.hpp>
#include <rfaas/function_name.hpp>

namespace rfaas::protocol {

// ---- constants --------------------------------------------------------------------

/// "RFAS" as bytes on the wire ('R' first), i.e. 0x53414652 read little-endian.
constexpr uint32_t kMagic = 0x53414652u;
/// The version this code speaks. A peer speaking another version is answered
/// with ErrorCode::VersionMismatch and closed; the Header layout never changes.
constexpr uint16_t kVersion = 8;

/// Most worker threads (leased cores) per allocation.
constexpr uint32_t kMaxWorkers = 256;
/// Most input slots per worker (the slot index is 8 bits of the immediate).
constexpr uint32_t kMaxSlots = 256;
/// Largest input or result slot, header included.
constexpr uint32_t kMaxSlotSize = 1u << 30;
/// Largest function library.
constexpr uint64_t kMaxLibrarySize = 1ull << 30;
/// Capacity of fixed text fields (NUL-terminated, so one less usable byte).
constexpr size_t kHostCapacity = 256;
constexpr size_t kNameCapacity = 64;
constexpr size_t kMessageCapacity = 128;
/// Size of lease tokens and secrets.
constexpr size_t kTokenSize = 16;
/// Accounting.worker value meaning "the whole executor".
constexpr uint32_t kAllWorkers = 0xFFFFFFFFu;

// ---- enums ------------------------------------------------------------------------

enum class MessageType : uint16_t {
  ClientHello = 1,         ///< private data, client -> manager connect
  ExecutorHello = 2,       ///< private data, executor -> manager connect
  WorkerHello = 3,         ///< private data, worker -> client connect
  ConnectReply = 4,        ///< private data of the accept answering any hello
  AllocationRequest = 5,   ///< client -> manager
  AllocationResponse = 6,  ///< manager -> client
  BufferAdvertisement = 7, ///< worker -> client (input slots), manager -> executor (accounting)
  CodeHeader = 8,          ///< client -> worker 0: where to read the library
  Ready = 9,               ///< worker -> client: library loaded (or why not)
  Invocation = 10,         ///< client -> worker input slot, followed by the payload
  Result = 11,             ///< worker -> client result slot, followed by the output
  Accounting = 12,         ///< executor -> manager: counters to add
  Shutdown = 13,           ///< any direction: goodbye, with a reason
  // Resource manager (rm_messages.hpp):
  NodeRegister = 14,     ///< node -> resource manager
  NodeRegistered = 15,   ///< resource manager -> node
  Heartbeat = 16,        ///< node -> resource manager
  LeaseRequest = 17,     ///< client -> resource manager
  LeaseRenew = 18,       ///< client -> resource manager
  LeaseRelease = 19,     ///< client -> resource manager
  LeaseGrant = 20,       ///< resource manager -> client (answers 17..19)
  LeaseEnded = 21,       ///< resource manager -> node
  AccountingReport = 22, ///< node -> resource manager
  LeaseProof = 23,       ///< client -> executor manager, before AllocationRequest
  LeasesEnded = 24,      ///< resource manager -> node: several LeaseEnded at once
};
constexpr uint16_t kMaxMessageType = 24;

/// Status carried by replies and results. Values 0..15 only: a result's status
/// also travels in 4 bits of the immediate.
enum class ErrorCode : uint16_t {
  Ok = 0,
  /// No exported function has the invoked name hash.
  UnknownFunction = 1,
  /// The payload does not fit the input slot.
  PayloadTooLarge = 2,
  /// The function returned more bytes than the client's result slot holds.
  OutputTooLarge = 3,
  /// The function raised a fatal signal; ResultHeader::detail holds its number.
  FunctionCrashed = 4,
  /// Unknown lease or allocation, wrong token or secret, expired lease.
  LeaseInvalid = 5,
  /// The peer speaks another protocol version.
  VersionMismatch = 6,
  /// A bug or a local failure on the replying side (see the message text).
  Internal = 7,
  /// A message was malformed (a WireResult other than version mismatch).
  BadRequest = 8,
  /// Not enough free cores or memory, or too many allocations.
  ResourcesUnavailable = 9,
  /// The library could not be read, failed its checksum, or did not load.
  LibraryInvalid = 10,
  /// The sender is ending the allocation (client shutdown, lease expired,
  /// executor ending after a crash, manager stopping).
  ShuttingDown = 11,
  /// A deadline passed on the replying side (workers did not connect, ...).
  Timeout = 12,
  /// The resource manager has no room now but is starting nodes for it (a
  /// SLURM pilot job): ask again after the hint (LeaseGrant::expiry_ms).
  /// Added after 12 without changing the others: older peers see an
  /// unknown code only from a resource manager that provisions nodes.
  Provisioning = 13,
};
constexpr uint16_t kMaxErrorCode = 13;
static_assert(kMaxErrorCode <= 15, "ErrorCode must fit the 4 status bits of the immediate");

/// Why decoding or encoding failed.
enum class WireError : uint8_t {
  Ok = 0,
  /// Fewer bytes than the message (or its declared trailing data) needs.
  Truncated,
  /// encode(): the output buffer is smaller than the fixed part.
  BufferTooSmall,
  /// Not an rFaaS message.
  BadMagic,
  /// Header::version is not kVersion.
  VersionMismatch,
  /// A known type, but not the one expected here.
  UnexpectedType,
  /// A type this version does not define.
  UnknownType,
  /// A length or count exceeds its limit (or a payload exceeds its slot).
  TooLarge,
  /// Fields contradict each other (a buffer smaller than its slots, ...).
  Inconsistent,
  /// A field holds a value outside its domain (unterminated text, bad enum).
  InvalidField,
};

/// Outcome of encode()/decode(). `detail` is a static string naming the
/// message and field; `size` is the bytes written (encode) or the bytes the
/// message occupies including its trailing data (decode).
struct WireResult {
  WireError error = WireError::Ok;
  size_t size = 0;
  const char *detail = "";

  bool ok() const noexcept { return error == WireError::Ok; }
  explicit operator bool() const noexcept { return ok(); }
};

const char *to_string(MessageType t) noexcept;
const char *to_string(ErrorCode c) noexcept;
const char *to_string(WireError e) noexcept;
/// "protocol: version mismatch: Header.version is not 5" style sentence.
std::string describe(const WireResult &r);
/// The status to answer a malformed message with: VersionMismatch for a
/// version mismatch, BadRequest otherwise (Ok for Ok).
ErrorCode reply_code(WireError e) noexcept;

constexpr bool is_known(MessageType t) noexcept {
  return static_cast<uint16_t>(t) >= 1 && static_cast<uint16_t>(t) <= kMaxMessageType;
}
constexpr bool is_known(ErrorCode c) noexcept { return static_cast<uint16_t>(c) <= kMaxErrorCode; }

// ---- field types ------------------------------------------------------------------

/// A field that must be zero on the wire; ignored when read.
template <class T> struct Reserved { T value = 0; };

/// A 128-bit lease token or allocation secret: opaque random bytes.
struct Token {
  uint8_t bytes[kTokenSize] = {};
};
/// Constant-time comparison, for secrets.
bool equal(const Token &a, const Token &b) noexcept;

/// Copy `text` into a fixed NUL-terminated field. Returns false (and stores
/// nothing) if it does not fit with its terminator.
template <size_t N> bool set_text(char (&field)[N], std::string_view text) noexcept {
  if (text.size() >= N)
    return false;
  std::memset(field, 0, N);
  std::memcpy(field, text.data(), text.size());
  return true;
}
/// Like set_text, but truncates instead of failing (for human-readable notes).
template <size_t N> void set_text_truncated(char (&field)[N], std::string_view text) noexcept {
  set_text(field, text.substr(0, N - 1));
}
/// The text of a fixed field, up to its first NUL (the whole field if none).
template <size_t N> std::string_view get_text(const char (&field)[N]) noexcept {
  size_t n = 0;
  while (n < N && field[n] != '\0')
    ++n;
  return std::string_view(field, n);
}

// ---- hashes -----------------------------------------------------------------------

/// 32-bit FNV-1a of a function name: how invocations name functions. Defined
/// with rfaas::function_name, which applications use to hash a name once.
constexpr uint32_t function_hash(std::string_view name) noexcept {
  return rfaas::function_name::hash(name);
}

/// 64-bit FNV-1a over a library's bytes: CodeHeader::checksum.
uint64_t library_checksum(const void *data, size_t size) noexcept;

// ---- messages ---------------------------------------------------------------------
//
// Each message lists its fields in wire order in fields(); the tests check that
// this order matches the struct's offsets. Offsets are asserted below.

struct Header {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  MessageType type = MessageType::ClientHello;

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.magic);
    f(s.version);
    f(s.type);
  }
};

/// Client -> executor manager, as connection private data. The manager answers
/// with ConnectReply (accepting even on error, so the status reaches the client)
/// and closes on a non-Ok status.
struct ClientHello {
  static constexpr MessageType kType = MessageType::ClientHello;
  static constexpr const char *kName = "ClientHello";
  Header header{kMagic, kVersion, kType};
  /// Lease granted by the resource manager (0 in standalone mode).
  uint64_t lease_id = 0;
  /// Lease token granted with it (ignored in standalone mode).
  Token token;

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.header);
    f(s.lease_id);
    f(s.token);
  }
  WireResult validate() const noexcept { return {}; }
};

/// ExecutorHello::allocation_id of a pooled executor's link: made while it
/// waits for an allocation, with the per-executor secret its zygote gave it.
/// The manager binds the link to the allocation the executor later takes,
/// and the secret is spent then. Never an allocation's id.
constexpr uint64_t kPooledExecutor = 0;

/// Executor -> its manager, as connection private data, for accounting.
struct ExecutorHello {
  static constexpr MessageType kType = MessageType::ExecutorHello;
  static constexpr const char *kName = "ExecutorHello";
  Header header{kMagic, kVersion, kType};
  uint64_t allocation_id = 0;
  /// Secret the manager handed to this executor when it started it (a
  /// pooled executor's link: the secret of that pooled executor).
  Token secret;

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.header);
    f(s.allocation_id);
    f(s.secret);
  }
  WireResult validate() const noexcept { return {}; }
};

/// Worker -> client listener, as connection private data. The client accepts
/// only its own allocation id (64-bit, unpredictable) and each worker once.
struct WorkerHello {
  static constexpr MessageType kType = MessageType::WorkerHello;
  static constexpr const char *kName = "WorkerHello";
  Header header{kMagic, kVersion, kType};
  uint64_t allocation_id = 0;
  uint32_t worker = 0;
  uint32_t workers = 0;

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.header);
    f(s.allocation_id);
    f(s.worker);
    f(s.workers);
  }
  WireResult validate() const noexcept {
    if (workers == 0 || workers > kMaxWorkers)
      return {WireError::TooLarge, 0, "WorkerHello.workers must be 1..256"};
    if (worker >= workers)
      return {WireError::Inconsistent, 0, "WorkerHello.worker must be below workers"};
    return {};
  }
};

/// The accepting side's answer to any hello, as accept private data. On a
/// version mismatch header.version is the answering side's version.
struct ConnectReply {
  static constexpr MessageType kType = MessageType::ConnectReply;
  static constexpr const char *kName = "ConnectReply";
  Header header{kMagic, kVersion, kType};
  ErrorCode status = ErrorCode::Ok;
  Reserved<uint16_t> reserved0;
  Reserved<uint32_t> reserved1;

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.header);
    f(s.status);
    f(s.reserved0);
    f(s.reserved1);
  }
  WireResult validate() const noexcept {
    if (!is_known(status))
      return {WireError::InvalidField, 0, "ConnectReply.status is not an ErrorCode"};
    return {};
  }
};

/// A registered buffer divided into equal slots: slot i is at byte offset
/// i * stride() of `buffer`, and holds slot_size bytes. Used for a worker's
/// input slots, for the client's result slots of each worker, and for the
/// manager's accounting record.
struct BufferDescriptor {
  rdmalib::RemoteBuffer buffer;
  uint32_t worker = 0;
  uint32_t slots = 0;
  uint32_t slot_size = 0;
  /// Bytes from one slot's start to the next one's; 0 means slot_size (the
  /// slots are packed). A worker's input slots are spaced further apart, so
  /// that each is followed by a guard page.
  uint32_t slot_stride = 0;

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.buffer);
    f(s.worker);
    f(s.slots);
    f(s.slot_size);
    f(s.slot_stride);
  }
  /// Bytes from one slot's start to the next one's.
  uint64_t stride() const noexcept { return slot_stride ? slot_stride : slot_size; }
  /// Byte offset of slot `i` in `buffer`.
  uint64_t offset(uint32_t i) const noexcept { return uint64_t(i) * stride(); }
  /// Checks limits and that the buffer holds its slots.
  WireResult validate() const noexcept {
    if (slots == 0 || slots > kMaxSlots)
      return {WireError::TooLarge, 0, "BufferDescriptor.slots must be 1..256"};
    if (slot_size == 0 || slot_size > kMaxSlotSize)
      return {WireError::TooLarge, 0, "BufferDescriptor.slot_size must be 1..2^30"};
    if (slot_stride != 0 && slot_stride < slot_size)
      return {WireError::Inconsistent, 0,
              "BufferDescriptor.slot_stride is smaller than slot_size (the slots overlap)"};
    if (buffer.size < offset(slots - 1) + slot_size)
      return {WireError::Inconsistent, 0,
              "BufferDescriptor.buffer is smaller than its slots at their stride"};
    return {};
  }
};

/// Client -> manager on the ClientHello connection; followed on the wire by
/// `cores` BufferDescriptors, one per worker in worker order: the client's
/// result slots for that worker (result of input slot s goes to result slot s,
/// so each needs slots >= input_slots and slot_size >= sizeof(ResultHeader)).
/// Encode and decode it with the overloads that take the descriptors.
struct AllocationRequest {
  static constexpr MessageType kType = MessageType::AllocationRequest;
  static constexpr const char *kName = "AllocationRequest";
  Header header{kMagic, kVersion, kType};
  /// Worker threads, one per leased core.
  uint32_t cores = 0;
  /// Memory limit of the executor in MiB; 0 = the manager's default.
  uint32_t memory_mib = 0;
  /// How long a worker busy-polls after an invocation before it blocks:
  /// -1 always hot, 0 never hot, otherwise milliseconds.
  int32_t hot_timeout_ms = 0;
  /// Input slots per worker (concurrent invocations per worker).
  uint32_t input_slots = 1;
  /// Bytes per input slot, InvocationHeader included.
  uint32_t input_slot_size = 0;
  /// Port of the client's listener, which the workers connect to; 0 when
  /// client_host is an opaque endpoint name.
  uint16_t client_port = 0;
  /// The container image the executor runs in (sandbox kind oci): 0 the
  /// manager's default image, n the n-th of its allow-list
  /// (executor.oci.images). A manager that cannot honour it refuses the
  /// request (bad_request); one older than this field ignores it (the field
  /// was reserved, zero on the wire).
  uint16_t image = 0;
  /// Size of the library the client will ship (CodeHeader repeats it).
  uint64_t library_size = 0;
  /// library_checksum() of it.
  uint64_t library_checksum = 0;
  /// Host of the client's listener (IP literal or name), or on fabrics not
  /// addressed by IP its whole endpoint name ("ofi:FORMAT:HEX",
  /// rdmalib::Address::host_text()); NUL-terminated.
  char client_host[kHostCapacity] = {};

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.header);
    f(s.cores);
    f(s.memory_mib);
    f(s.hot_timeout_ms);
    f(s.input_slots);
    f(s.input_slot_size);
    f(s.client_port);
    f(s.image);
    f(s.library_size);
    f(s.library_checksum);
    f(s.client_host);
  }
  WireResult validate() const noexcept;
  /// Bytes of descriptors that follow the fixed part.
  uint64_t trailing_bytes() const noexcept;
};

/// Manager -> client, answering an AllocationRequest once the executor exists.
struct AllocationResponse {
  static constexpr MessageType kType = MessageType::AllocationResponse;
  static constexpr const char *kName = "AllocationResponse";
  Header header{kMagic, kVersion, kType};
  /// Unpredictable 64-bit id; workers present it in WorkerHello.
  uint64_t allocation_id = 0;
  ErrorCode status = ErrorCode::Ok;
  Reserved<uint16_t> reserved0;
  /// Workers that will connect (= cores granted).
  uint32_t workers = 0;
  /// Why, when status is not Ok (human-readable, may be truncated).
  char message[kMessageCapacity] = {};

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.header);
    f(s.allocation_id);
    f(s.status);
    f(s.reserved0);
    f(s.workers);
    f(s.message);
  }
  WireResult validate() const noexcept;
};

/// Worker -> client after the connection is up: its input slots. Manager ->
/// executor: its accounting record (worker = kAllWorkers, slots 1, slot_size 32).
struct BufferAdvertisement {
  static constexpr MessageType kType = MessageType::BufferAdvertisement;
  static constexpr const char *kName = "BufferAdvertisement";
  Header header{kMagic, kVersion, kType};
  BufferDescriptor descriptor;

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.header);
    f(s.descriptor);
  }
  WireResult validate() const noexcept { return descriptor.validate(); }
};

/// Client -> worker 0: the library is in the client's memory at `source`
/// (registered for remote read); the worker reads it, verifies the checksum,
/// loads it, and every worker answers with Ready. The client keeps `source`
/// registered until all Ready messages arrived.
struct CodeHeader {
  static constexpr MessageType kType = MessageType::CodeHeader;
  static constexpr const char *kName = "CodeHeader";
  Header header{kMagic, kVersion, kType};
  uint64_t library_size = 0;
  uint64_t checksum = 0;
  rdmalib::RemoteBuffer source;
  /// File name of the library, for logs (NUL-terminated).
  char name[kNameCapacity] = {};

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.header);
    f(s.library_size);
    f(s.checksum);
    f(s.source);
    f(s.name);
  }
  WireResult validate() const noexcept;
};

/// Worker -> client once the library is loaded (status Ok) or failed to load
/// (LibraryInvalid, with the loader's text in `message`).
struct Ready {
  static constexpr MessageType kType = MessageType::Ready;
  static constexpr const char *kName = "Ready";
  Header header{kMagic, kVersion, kType};
  ErrorCode status = ErrorCode::Ok;
  Reserved<uint16_t> reserved0;
  uint32_t worker = 0;
  /// Exported functions found in the library.
  uint32_t function_count = 0;
  Reserved<uint32_t> reserved1;
  char message[kMessageCapacity] = {};

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.header);
    f(s.status);
    f(s.reserved0);
    f(s.worker);
    f(s.function_count);
    f(s.reserved1);
    f(s.message);
  }
  WireResult validate() const noexcept;
};

/// Bytes of every slot (a worker's input slots, a client's result slots, the
/// prefix of a librfaas registered block) before its data, payload or output.
/// The headers are written at the end of this prefix, right before the data:
/// one write carries headers and data, and the data is at the same place of
/// the slot whichever headers precede it.
constexpr size_t kSlotPrefix = 64;

/// Slot writes of at most this many bytes carry only their headers and data
/// (see slot_write_lead).
constexpr size_t kSmallSlotWrite = 32;

/// Where a slot write starts, in bytes before its data, for `headers` bytes of
/// headers followed by `data` bytes. A small write (kSmallSlotWrite bytes in
/// all) starts at its headers: shm copies up to 32 bytes inline within one
/// cache line, and an 8-byte call with 16 bytes of headers stays there. A
/// larger one starts at the slot's start, its prefix padded: it then covers
/// whole cache lines from a line boundary, the same lines it touches anyway,
/// which shm copies faster than a write that starts or ends inside a line
/// (docs/BACKEND-BUGS.md) and a NIC writes without a partial line.
constexpr size_t slot_write_lead(size_t headers, uint64_t data) noexcept {
  return headers + data <= kSmallSlotWrite ? headers : kSlotPrefix;
}

/// InvocationHeader::flags.
enum InvocationFlags : uint16_t {
  /// A ResultTarget precedes the header in the slot: the result goes there,
  /// and the worker keeps it as this slot's target.
  kWithTarget = 1u << 0,
  /// The result goes to the target the last kWithTarget invocation of this
  /// slot named (the client saves 40 bytes per call when it reuses an output).
  kSameTarget = 1u << 1,
};
constexpr uint16_t kKnownInvocationFlags = kWithTarget | kSameTarget;

/// Client -> worker: the last 16 bytes of an input slot's prefix, immediately
/// followed by `payload_size` bytes, with one write_imm (see make_immediate)
/// that starts slot_write_lead() bytes before the payload.
/// Slot-resident headers carry no Header: the link's version was settled by
/// the hellos, the immediate says which slot was written, and every field is
/// checked against it and against the slot.
///
/// Result target: with kWithTarget (or kSameTarget), the client asks for the
/// result to be written in place, into its own registered memory, instead of
/// into its result slot: a successful result of n output bytes with n + 16 <=
/// capacity is written as ResultHeader + output at the ResultTarget with one
/// write_imm whose status bits say "in place" (kImmInPlace). Every other
/// outcome (an error, an output larger than the target) goes to the result
/// slot as without a target.
struct InvocationHeader {
  static constexpr MessageType kType = MessageType::Invocation;
  static constexpr const char *kName = "InvocationHeader";
  /// Decoded from a slot: data beyond the slot is "too large", not "truncated".
  static constexpr bool kInSlot = true;
  /// Chosen by the client, unique among its recent invocations (the low 32
  /// bits of a counter); its low 20 bits are the immediate's sequence.
  uint32_t invocation_id = 0;
  /// function_hash() of the function's name.
  uint32_t function = 0;
  uint32_t payload_size = 0;
  /// The input slot this header is in (must match the immediate).
  uint16_t slot = 0;
  /// InvocationFlags.
  uint16_t flags = 0;

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.invocation_id);
    f(s.function);
    f(s.payload_size);
    f(s.slot);
    f(s.flags);
  }
  WireResult validate() const noexcept {
    if (slot >= kMaxSlots)
      return {WireError::TooLarge, 0, "InvocationHeader.slot must be below 256"};
    if (payload_size > kMaxSlotSize - kSlotPrefix)
      return {WireError::TooLarge, 0, "InvocationHeader.payload_size exceeds the largest slot"};
    if (flags & ~kKnownInvocationFlags)
      return {WireError::InvalidField, 0, "InvocationHeader.flags has unknown bits"};
    if ((flags & kWithTarget) && (flags & kSameTarget))
      return {WireError::Inconsistent, 0,
              "InvocationHeader.flags names a new target and the previous one"};
    return {};
  }
  /// Whether the client named a result target (new or the slot's previous).
  bool has_target() const noexcept { return flags != 0; }
  uint64_t trailing_bytes() const noexcept { return payload_size; }
};

/// Where a result may be written in place: the client's registered region
/// (remote-writable), addressed like every RemoteBuffer, (target, offset).
/// Sent in the slot right before the InvocationHeader that sets kWithTarget.
struct ResultTarget {
  static constexpr MessageType kType = MessageType::Invocation;
  static constexpr const char *kName = "ResultTarget";
  rdmalib::RemoteBuffer target;
  /// Where in `target` the ResultHeader goes; the output follows it.
  uint64_t offset = 0;
  /// Bytes the target holds for ResultHeader + output.
  uint32_t capacity = 0;
  Reserved<uint32_t> reserved0;

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.target);
    f(s.offset);
    f(s.capacity);
    f(s.reserved0);
  }
  WireResult validate() const noexcept;
  bool operator==(const ResultTarget &o) const noexcept {
    return target.addr == o.target.addr && target.key == o.target.key &&
           target.size == o.target.size && offset == o.offset && capacity == o.capacity;
  }
  bool operator!=(const ResultTarget &o) const noexcept { return !(*this == o); }
};

/// Worker -> client: the last 16 bytes of the prefix of the client's result
/// slot (same index as the input slot), or at the invocation's ResultTarget,
/// immediately followed by `output_size` bytes, with one write_imm (starting
/// slot_write_lead() bytes before the output). On an error status
/// output_size is 0. No Header, like InvocationHeader.
struct ResultHeader {
  static constexpr MessageType kType = MessageType::Result;
  static constexpr const char *kName = "ResultHeader";
  static constexpr bool kInSlot = true;
  /// The InvocationHeader's.
  uint32_t invocation_id = 0;
  uint32_t output_size = 0;
  ErrorCode status = ErrorCode::Ok;
  uint16_t slot = 0;
  /// Extra fact for an error: the signal number (FunctionCrashed), the size the
  /// function returned (OutputTooLarge), the largest payload (PayloadTooLarge),
  /// the unknown hash (UnknownFunction); 0 otherwise.
  uint32_t detail = 0;

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.invocation_id);
    f(s.output_size);
    f(s.status);
    f(s.slot);
    f(s.detail);
  }
  WireResult validate() const noexcept {
    if (!is_known(status))
      return {WireError::InvalidField, 0, "ResultHeader.status is not an ErrorCode"};
    if (slot >= kMaxSlots)
      return {WireError::TooLarge, 0, "ResultHeader.slot must be below 256"};
    if (output_size > kMaxSlotSize - kSlotPrefix)
      return {WireError::TooLarge, 0, "ResultHeader.output_size exceeds the largest slot"};
    return {};
  }
  uint64_t trailing_bytes() const noexcept { return output_size; }
};

/// Accounting counters, in nanoseconds and invocations. Both the body of an
/// Accounting message and the layout of the manager's per-allocation record
/// that executors update with fetch_add (8-byte aligned 64-bit words).
/// Values are always increments: the manager adds them up.
struct AccountingCounters {
  uint64_t allocation_ns = 0;
  uint64_t hot_polling_ns = 0;
  uint64_t execution_ns = 0;
  uint64_t invocations = 0;

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.allocation_ns);
    f(s.hot_polling_ns);
    f(s.execution_ns);
    f(s.invocations);
  }
};

/// Executor -> manager when the fabric has no atomics (or at the end).
struct Accounting {
  static constexpr MessageType kType = MessageType::Accounting;
  static constexpr const char *kName = "Accounting";
  Header header{kMagic, kVersion, kType};
  uint64_t allocation_id = 0;
  /// Worker index, or kAllWorkers.
  uint32_t worker = kAllWorkers;
  Reserved<uint32_t> reserved0;
  AccountingCounters counters;

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.header);
    f(s.allocation_id);
    f(s.worker);
    f(s.reserved0);
    f(s.counters);
  }
  WireResult validate() const noexcept {
    if (worker != kAllWorkers && worker >= kMaxWorkers)
      return {WireError::TooLarge, 0, "Accounting.worker must be below 256 or kAllWorkers"};
    return {};
  }
};

/// Goodbye, in any direction: client -> worker or manager (deallocate),
/// worker -> client (executor ending), manager -> client (lease expired),
/// executor -> manager. The receiver stops using the connection.
struct Shutdown {
  static constexpr MessageType kType = MessageType::Shutdown;
  static constexpr const char *kName = "Shutdown";
  Header header{kMagic, kVersion, kType};
  uint64_t allocation_id = 0;
  /// Ok for a normal end, otherwise why.
  ErrorCode reason = ErrorCode::Ok;
  Reserved<uint16_t> reserved0;
  Reserved<uint32_t> reserved1;

  template <class S, class F> static void fields(S &s, F &f) {
    f(s.header);
    f(s.allocation_id);
    f(s.reason);
    f(s.reserved0);
    f(s.reserved1);
  }
  WireResult validate() const noexcept {
    if (!is_known(reason))
      return {WireError::InvalidField, 0, "Shutdown.reason is not an ErrorCode"};
    return {};
  }
};

// ---- layout checks ----------------------------------------------------------------

#define RFAAS_WIRE_LAYOUT(T, size)                                                                 \
  static_assert(sizeof(T) == (size), #T " has a fixed wire size");                                 \
  static_assert(std::is_trivially_copyable<T>::value, #T " is a wire type");                       \
  static_assert(std::is_standard_layout<T>::value, #T " is a wire type")
#define RFAAS_WIRE_OFFSET(T, field, off)                                                           \
  static_assert(offsetof(T, field) == (off), #T "." #field " is at byte " #off)

RFAAS_WIRE_LAYOUT(Header, 8);
RFAAS_WIRE_OFFSET(Header, magic, 0);
RFAAS_WIRE_OFFSET(Header, version, 4);
RFAAS_WIRE_OFFSET(Header, type, 6);
RFAAS_WIRE_LAYOUT(Token, 16);

RFAAS_WIRE_LAYOUT(ClientHello, 32);
RFAAS_WIRE_OFFSET(ClientHello, lease_id, 8);
RFAAS_WIRE_OFFSET(ClientHello, token, 16);

RFAAS_WIRE_LAYOUT(ExecutorHello, 32);
RFAAS_WIRE_OFFSET(ExecutorHello, allocation_id, 8);
RFAAS_WIRE_OFFSET(ExecutorHello, secret, 16);

RFAAS_WIRE_LAYOUT(WorkerHello, 24);
RFAAS_WIRE_OFFSET(WorkerHello, allocation_id, 8);
RFAAS_WIRE_OFFSET(WorkerHello, worker, 16);
RFAAS_WIRE_OFFSET(WorkerHello, workers, 20);

RFAAS_WIRE_LAYOUT(ConnectReply, 16);
RFAAS_WIRE_OFFSET(ConnectReply, status, 8);

RFAAS_WIRE_LAYOUT(BufferDescriptor, 40);
RFAAS_WIRE_OFFSET(BufferDescriptor, buffer, 0);
RFAAS_WIRE_OFFSET(BufferDescriptor, worker, 24);
RFAAS_WIRE_OFFSET(BufferDescriptor, slots, 28);
RFAAS_WIRE_OFFSET(BufferDescriptor, slot_size, 32);
RFAAS_WIRE_OFFSET(BufferDescriptor, slot_stride, 36);

RFAAS_WIRE_LAYOUT(AllocationRequest, 304);
RFAAS_WIRE_OFFSET(AllocationRequest, cores, 8);
RFAAS_WIRE_OFFSET(AllocationRequest, memory_mib, 12);
RFAAS_WIRE_OFFSET(AllocationRequest, hot_timeout_ms, 16);
RFAAS_WIRE_OFFSET(AllocationRequest, input_slots, 20);
RFAAS_WIRE_OFFSET(AllocationRequest, input_slot_size, 24);
RFAAS_WIRE_OFFSET(AllocationRequest, client_port, 28);
RFAAS_WIRE_OFFSET(AllocationRequest, library_size, 32);
RFAAS_WIRE_OFFSET(AllocationRequest, library_checksum, 40);
RFAAS_WIRE_OFFSET(AllocationRequest, client_host, 48);

RFAAS_WIRE_LAYOUT(AllocationResponse, 152);
RFAAS_WIRE_OFFSET(AllocationResponse, allocation_id, 8);
RFAAS_WIRE_OFFSET(AllocationResponse, status, 16);
RFAAS_WIRE_OFFSET(AllocationResponse, workers, 20);
RFAAS_WIRE_OFFSET(AllocationResponse, message, 24);

RFAAS_WIRE_LAYOUT(BufferAdvertisement, 48);
RFAAS_WIRE_OFFSET(BufferAdvertisement, descriptor, 8);

RFAAS_WIRE_LAYOUT(CodeHeader, 112);
RFAAS_WIRE_OFFSET(CodeHeader, library_size, 8);
RFAAS_WIRE_OFFSET(CodeHeader, checksum, 16);
RFAAS_WIRE_OFFSET(CodeHeader, source, 24);
RFAAS_WIRE_OFFSET(CodeHeader, name, 48);

RFAAS_WIRE_LAYOUT(Ready, 152);
RFAAS_WIRE_OFFSET(Ready, status, 8);
RFAAS_WIRE_OFFSET(Ready, worker, 12);
RFAAS_WIRE_OFFSET(Ready, function_count, 16);
RFAAS_WIRE_OFFSET(Ready, message, 24);

RFAAS_WIRE_LAYOUT(InvocationHeader, 16);
RFAAS_WIRE_OFFSET(InvocationHeader, invocation_id, 0);
RFAAS_WIRE_OFFSET(InvocationHeader, function, 4);
RFAAS_WIRE_OFFSET(InvocationHeader, payload_size, 8);
RFAAS_WIRE_OFFSET(InvocationHeader, slot, 12);
RFAAS_WIRE_OFFSET(InvocationHeader, flags, 14);

RFAAS_WIRE_LAYOUT(ResultTarget, 40);
RFAAS_WIRE_OFFSET(ResultTarget, target, 0);
RFAAS_WIRE_OFFSET(ResultTarget, offset, 24);
RFAAS_WIRE_OFFSET(ResultTarget, capacity, 32);

RFAAS_WIRE_LAYOUT(ResultHeader, 16);
RFAAS_WIRE_OFFSET(ResultHeader, invocation_id, 0);
RFAAS_WIRE_OFFSET(ResultHeader, output_size, 4);
RFAAS_WIRE_OFFSET(ResultHeader, status, 8);
RFAAS_WIRE_OFFSET(ResultHeader, slot, 10);
RFAAS_WIRE_OFFSET(ResultHeader, detail, 12);

RFAAS_WIRE_LAYOUT(AccountingCounters, 32);
RFAAS_WIRE_OFFSET(AccountingCounters, allocation_ns, 0);
RFAAS_WIRE_OFFSET(AccountingCounters, hot_polling_ns, 8);
RFAAS_WIRE_OFFSET(AccountingCounters, execution_ns, 16);
RFAAS_WIRE_OFFSET(AccountingCounters, invocations, 24);

RFAAS_WIRE_LAYOUT(Accounting, 56);
RFAAS_WIRE_OFFSET(Accounting, allocation_id, 8);
RFAAS_WIRE_OFFSET(Accounting, worker, 16);
RFAAS_WIRE_OFFSET(Accounting, counters, 24);

RFAAS_WIRE_LAYOUT(Shutdown, 24);
RFAAS_WIRE_OFFSET(Shutdown, allocation_id, 8);
RFAAS_WIRE_OFFSET(Shutdown, reason, 16);

#undef RFAAS_WIRE_LAYOUT
#undef RFAAS_WIRE_OFFSET

/// Connection private data is guaranteed to carry this much on every fabric
/// (rdmalib::Capabilities::max_private_data is at least 32): every hello and
/// the reply fit it.
constexpr size_t kMinPrivateData = 32;
static_assert(sizeof(ClientHello) <= kMinPrivateData && sizeof(ExecutorHello) <= kMinPrivateData &&
                  sizeof(WorkerHello) <= kMinPrivateData && sizeof(ConnectReply) <= kMinPrivateData,
              "hellos travel as connection private data");

/// Payload / output bytes start right after the slot headers.
constexpr size_t kInvocationHeaderSize = sizeof(InvocationHeader);
constexpr size_t kResultTargetSize = sizeof(ResultTarget);
constexpr size_t kResultHeaderSize = sizeof(ResultHeader);
static_assert(kResultTargetSize + kInvocationHeaderSize <= kSlotPrefix,
              "an invocation's headers fit the input slot's prefix");
static_assert(kInvocationHeaderSize < kSmallSlotWrite && kResultHeaderSize < kSmallSlotWrite &&
                  kSmallSlotWrite <= kSlotPrefix,
              "a small write starts inside the prefix");

/// Receive buffers for control messages (everything except AllocationRequest,
/// code and slot traffic) need this many bytes. It also covers the 16-byte
/// write_imm notification and goodbye messages of rdmalib.
constexpr size_t kControlMessageMax = 256;
static_assert(sizeof(AllocationResponse) <= kControlMessageMax &&
                  sizeof(Ready) <= kControlMessageMax && sizeof(CodeHeader) <= kControlMessageMax &&
                  sizeof(Accounting) <= kControlMessageMax &&
                  sizeof(BufferAdvertisement) <= kControlMessageMax,
              "control messages fit kControlMessageMax");
/// The largest AllocationRequest (kMaxWorkers descriptors): the manager's
/// receive buffers for client connections need this many bytes.
constexpr size_t kMaxAllocationRequestSize =
    sizeof(AllocationRequest) + kMaxWorkers * sizeof(BufferDescriptor);

// ---- immediate data ---------------------------------------------------------------
//
// The 32-bit immediate of every slot write (invocation and result):
//
//   bit 31 ............ 12 | 11 .... 8 | 7 ..... 0
//   sequence (20 bits)     | status    | slot
//
// sequence = invocation_id & 0xFFFFF, status = ErrorCode (0 for invocations;
// kImmInPlace for a result written at the invocation's target), slot = the
// slot index. The header in the slot is authoritative; the
// immediate lets the receiver find the slot without scanning and check that the
// header it reads belongs to this notification. The completion's length is
// never used (tcp reports 0).

constexpr unsigned kImmSlotBits = 8;
constexpr unsigned kImmStatusBits = 4;
constexpr unsigned kImmSequenceBits = 20;
constexpr uint32_t kImmSequenceMask = (1u << kImmSequenceBits) - 1;
static_assert(kImmSlotBits + kImmStatusBits + kImmSequenceBits == 32, "immediate is 32 bits");
static_assert(kMaxSlots == (1u << kImmSlotBits), "a slot index fits the immediate");

/// Status bits of a result written in place, into the InvocationHeader's
/// target rather than the result slot (the result's status is then Ok). Not
/// an ErrorCode.
constexpr uint32_t kImmInPlace = 0xFu;
static_assert(kMaxErrorCode < kImmInPlace, "the in-place marker is not an ErrorCode");

struct Immediate {
  uint32_t slot = 0;
  ErrorCode status = ErrorCode::Ok;
  uint32_t sequence = 0;
  /// The result is at the invocation's target, not in the result slot.
  bool in_place = false;
};

/// Immediate for a write into `slot` for invocation `invocation_id`. `slot`
/// must be below kMaxSlots (higher bits are dropped).
constexpr uint32_t make_immediate(uint32_t slot, uint64_t invocation_id,
                                  ErrorCode status = ErrorCode::Ok) noexcept {
  return (static_cast<uint32_t>(invocation_id & kImmSequenceMask) << 12) |
         ((static_cast<uint32_t>(status) & 0xFu) << 8) | (slot & 0xFFu);
}

/// Immediate for a successful result written at the invocation's target.
constexpr uint32_t make_in_place_immediate(uint32_t slot, uint64_t invocation_id) noexcept {
  return (static_cast<uint32_t>(invocation_id & kImmSequenceMask) << 12) | (kImmInPlace << 8) |
         (slot & 0xFFu);
}

constexpr Immediate parse_immediate(uint32_t imm) noexcept {
  const uint32_t bits = (imm >> 8) & 0xFu;
  return bits == kImmInPlace
             ? Immediate{imm & 0xFFu, ErrorCode::Ok, imm >> 12, true}
             : Immediate{imm & 0xFFu, static_cast<ErrorCode>(bits), imm >> 12, false};
}

/// True when `imm` was made for `invocation_id` (its low 20 bits).
constexpr bool immediate_matches(uint32_t imm, uint64_t invocation_id) noexcept {
  return (imm >> 12) == static_cast<uint32_t>(invocation_id & kImmSequenceMask);
}

// ---- encoding ---------------------------------------------------------------------

namespace detail {

template <class T> struct is_reserved : std::false_type {};
template <class T> struct is_reserved<Reserved<T>> : std::true_type {};

template <class T, bool = std::is_enum<T>::value> struct unsigned_of {
  using type = std::make_unsigned_t<T>;
};
template <class T> struct unsigned_of<T, true> {
  using type = std::make_unsigned_t<std::underlying_type_t<T>>;
};

/// Byte order of this host, from the compiler (GCC and Clang define it).
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
constexpr bool kHostLittleEndian = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
#else
constexpr bool kHostLittleEndian = false; // unknown: always take the portable path
#endif

/// Portable little-endian store/load by shifts: correct on every host.
template <class U> inline void store_le_portable(uint8_t *p, U v) noexcept {
  static_assert(std::is_unsigned<U>::value, "store_le takes unsigned integers");
  for (size_t i = 0; i < sizeof(U); ++i)
    p[i] = static_cast<uint8_t>(v >> (8 * i));
}
template <class U> inline U load_le_portable(const uint8_t *p) noexcept {
  static_assert(std::is_unsigned<U>::value, "load_le takes unsigned integers");
  U v = 0;
  for (size_t i = 0; i < sizeof(U); ++i)
    v = static_cast<U>(v | static_cast<U>(static_cast<U>(p[i]) << (8 * i)));
  return v;
}

/// Little-endian store/load. On a little-endian host the wire representation
/// is the native one, so this is one unaligned move (the shift loops are not
/// reliably merged by compilers); elsewhere it takes the portable path.
template <class U> inline void store_le(uint8_t *p, U v) noexcept {
  if constexpr (kHostLittleEndian)
    std::memcpy(p, &v, sizeof(U));
  else
    store_le_portable<U>(p, v);
}
template <class U> inline U load_le(const uint8_t *p) noexcept {
  if constexpr (kHostLittleEndian) {
    U v;
    std::memcpy(&v, p, sizeof(U));
    return v;
  } else {
    return load_le_portable<U>(p);
  }
}

struct Writer {
  uint8_t *p;
  template <class T> void operator()(const T &v) noexcept {
    if constexpr (std::is_integral<T>::value || std::is_enum<T>::value) {
      using U = typename unsigned_of<T>::type;
      store_le<U>(p, static_cast<U>(v));
      p += sizeof(T);
    } else if constexpr (std::is_array<T>::value) {
      static_assert(sizeof(std::remove_extent_t<T>) == 1, "only byte arrays");
      std::memcpy(p, v, sizeof(T));
      p += sizeof(T);
    } else if constexpr (is_reserved<T>::value) {
      std::memset(p, 0, sizeof(T));
      p += sizeof(T);
    } else if constexpr (std::is_same<T, rdmalib::RemoteBuffer>::value) {
      (*this)(v.addr);
      (*this)(v.key);
      (*this)(v.size);
    } else if constexpr (std::is_same<T, Token>::value) {
      (*this)(v.bytes);
    } else {
      T::fields(v, *this);
    }
  }
};

struct Reader {
  const uint8_t *p;
  template <class T> void operator()(T &v) noexcept {
    if constexpr (std::is_integral<T>::value || std::is_enum<T>::value) {
      using U = typename unsigned_of<T>::type;
      v = static_cast<T>(load_le<U>(p));
      p += sizeof(T);
    } else if constexpr (std::is_array<T>::value) {
      static_assert(sizeof(std::remove_extent_t<T>) == 1, "only byte arrays");
      std::memcpy(v, p, sizeof(T));
      p += sizeof(T);
    } else if constexpr (is_reserved<T>::value) {
      v = T{};
      p += sizeof(T);
    } else if constexpr (std::is_same<T, rdmalib::RemoteBuffer>::value) {
      (*this)(v.addr);
      (*this)(v.key);
      (*this)(v.size);
    } else if constexpr (std::is_same<T, Token>::value) {
      (*this)(v.bytes);
    } else {
      T::fields(v, *this);
    }
  }
};

template <class M, class = void> struct has_trailing : std::false_type {};
template <class M>
struct has_trailing<M, std::void_t<decltype(std::declval<const M &>().trailing_bytes())>>
    : std::true_type {};
template <class M> uint64_t trailing_of(const M &m) noexcept {
  if constexpr (has_trailing<M>::value)
    return m.trailing_bytes();
  else
    return 0;
}

template <class M, class = void> struct in_slot : std::false_type {};
template <class M>
struct in_slot<M, std::void_t<decltype(M::kInSlot)>> : std::integral_constant<bool, M::kInSlot> {};

static_assert(kVersion == 8, "check_header's texts name the version");

/// Header checks shared by decode() and peek(); fills `h` even on failure.
/// Inline: it runs for every invocation.
inline WireResult check_header(const void *in, size_t len, Header &h) noexcept {
  if (in == nullptr || len < sizeof(Header))
    return {WireError::Truncated, 0, "shorter than the 8-byte header"};
  Reader r{static_cast<const uint8_t *>(in)};
  Header::fields(h, r);
  if (h.magic != kMagic)
    return {WireError::BadMagic, 0, "Header.magic is not \"RFAS\""};
  if (h.version != kVersion)
    return {WireError::VersionMismatch, 0, "Header.version is not 8"};
  if (!is_known(h.type))
    return {WireError::UnknownType, 0, "Header.type is not a version 8 message type"};
  return {WireError::Ok, sizeof(Header), ""};
}

/// Whether M starts with a Header (all but the slot-resident messages).
template <class M, class = void> struct has_header : std::false_type {};
template <class M>
struct has_header<M, std::void_t<decltype(std::declval<M &>().header)>> : std::true_type {};

template <class M> WireResult encode_fixed(const M &m, void *out, size_t capacity) noexcept {
  WireResult v = m.validate();
  if (!v)
    return v;
  if (out == nullptr || capacity < sizeof(M))
    return {WireError::BufferTooSmall, 0, M::kName};
  if (in_slot<M>::value && sizeof(M) + trailing_of(m) > capacity)
    return {WireError::TooLarge, 0, "the payload does not fit the slot"};
  Writer w{static_cast<uint8_t *>(out)};
  if constexpr (has_header<M>::value) {
    M copy = m;
    copy.header = Header{kMagic, kVersion, M::kType};
    M::fields(static_cast<const M &>(copy), w);
  } else {
    M::fields(m, w);
  }
  return {WireError::Ok, sizeof(M), ""};
}

template <class M> WireResult decode_fixed(const void *in, size_t len, M &out) noexcept {
  if constexpr (has_header<M>::value) {
    WireResult h = check_header(in, len, out.header);
    if (!h)
      return h;
    if (out.header.type != M::kType)
      return {WireError::UnexpectedType, 0, M::kName};
  } else if (in == nullptr) {
    return {WireError::Truncated, 0, M::kName};
  }
  if (len < sizeof(M))
    return {WireError::Truncated, 0, M::kName};
  Reader r{static_cast<const uint8_t *>(in)};
  M::fields(out, r);
  WireResult v = out.validate();
  if (!v)
    return v;
  uint64_t total = sizeof(M) + trailing_of(out);
  if (total > len) {
    if (in_slot<M>::value)
      return {WireError::TooLarge, 0, "the declared payload extends beyond the slot"};
    return {WireError::Truncated, 0, "the declared trailing data extends beyond the input"};
  }
  return {WireError::Ok, static_cast<size_t>(total), ""};
}

template <class> struct dependent_false : std::false_type {};

} // namespace detail

/// Read and check only the header: magic, then version, then that the type is
/// known. `out` is filled whenever at least 8 bytes were given, so a caller can
/// log the peer's version on VersionMismatch and dispatch on out.type.
inline WireResult peek(const void *in, size_t len, Header &out) noexcept {
  return detail::check_header(in, len, out);
}

/// Write `m` (fixed part; header set to this version and M's type) at `out`.
/// For slot-resident headers (InvocationHeader, ResultHeader) `capacity` is the
/// bytes from `out` to the slot's end, and TooLarge means the payload would
/// not fit. Returns the bytes
/// written (sizeof(M)); the caller places any payload right after them.
template <class M> WireResult encode(const M &m, void *out, size_t capacity) noexcept {
  if constexpr (std::is_same<M, AllocationRequest>::value) {
    static_assert(detail::dependent_false<M>::value,
                  "encode an AllocationRequest with its BufferDescriptors");
    return {};
  } else {
    return detail::encode_fixed(m, out, capacity);
  }
}

/// Parse and validate a message of type M from `len` bytes at `in`. Returns the
/// bytes it occupies (fixed part plus declared payload). On VersionMismatch
/// out.header holds the peer's header. A slot-resident header is decoded from
/// where it starts to the end of its slot (`len`).
template <class M> WireResult decode(const void *in, size_t len, M &out) noexcept {
  if constexpr (std::is_same<M, AllocationRequest>::value) {
    static_assert(detail::dependent_false<M>::value,
                  "decode an AllocationRequest with its BufferDescriptors");
    return {};
  } else {
    return detail::decode_fixed(in, len, out);
  }
}

/// Write an invocation's headers right before its payload at `payload` (in
/// an input slot's image, kSlotPrefix into it, or in a registered block's
/// prefix): the InvocationHeader, and before it `target` when h sets
/// kWithTarget. Returns how many bytes before `payload` the headers start (16
/// or 56): the write of the invocation starts there. 0 when h or target is
/// invalid (nothing useful was written).
inline size_t encode_input_headers(void *payload, const InvocationHeader &h,
                                   const ResultTarget &target) noexcept {
  uint8_t *p = static_cast<uint8_t *>(payload) - kInvocationHeaderSize;
  if (!encode(h, p, kInvocationHeaderSize + h.payload_size))
    return 0;
  if (!(h.flags & kWithTarget))
    return kInvocationHeaderSize;
  if (!encode(target, p - kResultTargetSize, kResultTargetSize))
    return 0;
  return kInvocationHeaderSize + kResultTargetSize;
}

/// Read the headers of the invocation in an input slot of `slot_size` bytes
/// (the whole slot, as the worker holds it): the InvocationHeader that ends
/// kSlotPrefix bytes in, and, when it sets kWithTarget, the ResultTarget
/// right before it, into `target` (left alone otherwise). `h` is filled as
/// far as it was read, also on failure. The size returned counts from the
/// slot's start to the payload's end.
inline WireResult decode_input_slot(const void *slot, size_t slot_size, InvocationHeader &h,
                                    ResultTarget &target) noexcept {
  if (slot == nullptr || slot_size < kSlotPrefix)
    return {WireError::Truncated, 0, "an input slot is shorter than its 64-byte prefix"};
  const uint8_t *header = static_cast<const uint8_t *>(slot) + kSlotPrefix - kInvocationHeaderSize;
  WireResult r = decode(header, slot_size - kSlotPrefix + kInvocationHeaderSize, h);
  if (!r)
    return r;
  if (h.flags & kWithTarget) {
    WireResult t = decode(header - kResultTargetSize, kResultTargetSize, target);
    if (!t)
      return t;
  }
  r.size += kSlotPrefix - kInvocationHeaderSize;
  return r;
}

/// Bytes an AllocationRequest with `cores` descriptors occupies.
constexpr size_t allocation_request_size(uint32_t cores) noexcept {
  return sizeof(AllocationRequest) + static_cast<size_t>(cores) * sizeof(BufferDescriptor);
}

/// Encode an AllocationRequest followed by its result descriptors
/// (results.size() must equal m.cores, results[i].worker == i).
WireResult encode(const AllocationRequest &m, const std::vector<BufferDescriptor> &results,
                  void *out, size_t capacity) noexcept;
/// Decode an AllocationRequest and its descriptors (replacing `results`).
/// Allocates only for `results`, which is left empty on failure.
WireResult decode(const void *in, size_t len, AllocationRequest &out,
                  std::vector<BufferDescriptor> &results);

/// Convenience for control messages: encode into a new byte vector (empty on
/// failure, with the reason in *result when given).
template <class M> std::vector<uint8_t> to_bytes(const M &m, WireResult *result = nullptr) {
  std::vector<uint8_t> bytes(sizeof(M));
  WireResult r = encode(m, bytes.data(), bytes.size());
  if (result)
    *result = r;
  if (!r)
    bytes.clear();
  return bytes;
}

} // namespace rfaas::protocol
