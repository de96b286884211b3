// What the opened fabric can do, negotiated once when a Fabric opens.
//
// Upper layers (librfaas, the executor manager, executors, benchmarks) branch on
// these values and never on a provider or backend name, so a new provider that
// meets the contract works without touching them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rdmalib {

/// How a Connection is carried underneath.
enum class EndpointType : uint8_t {
  /// Connected endpoints (libfabric FI_EP_MSG, verbs RC queue pairs).
  Connected,
  /// Reliable datagrams (FI_EP_RDM): a Connection is an address-vector entry plus
  /// a handshake, and every operation names its peer internally.
  ReliableDatagram,
};

/// Who advances the transfer state machines.
enum class Progress : uint8_t {
  /// The provider or hardware progresses on its own.
  Auto,
  /// Only calls into the provider (polling, waiting) move data. rdmalib's wait
  /// and retry loops drive progress themselves; a caller that neither polls nor
  /// waits stalls its peer.
  Manual,
  /// Threads of the provider move the data (libfabric's sockets). A caller
  /// that busy-polls competes with them for a core, which on a small machine
  /// costs milliseconds per message: prefer Operations::wait to spinning.
  Thread,
};

/// "connected" or "rdm": the spelling of the device database, rfaas-info and
/// every log line.
const char *to_string(EndpointType e) noexcept;

/// The inverse of to_string(EndpointType); also accepts "msg", libfabric's own
/// name for connected endpoints (FI_EP_MSG). False (and `out` unchanged) for
/// any other spelling.
bool parse_endpoint_type(std::string_view text, EndpointType &out) noexcept;

/// "auto", "manual" or "thread".
const char *to_string(Progress p) noexcept;

/// The inverse of to_string(Progress): false (and `out` unchanged) otherwise.
bool parse_progress(std::string_view text, Progress &out) noexcept;

/// Capabilities that a mask can switch off, to force the fallback paths that
/// hardware like EFA needs on providers that would not otherwise take them.
enum CapabilityBit : uint32_t {
  /// Write-with-immediate delivered to the target as a completion.
  CapRemoteCqData = 1u << 0,
  /// 64-bit remote fetch-and-add and compare-and-swap.
  CapAtomics = 1u << 1,
  /// Remote addresses are virtual addresses (otherwise offsets into the region).
  CapVirtualAddressing = 1u << 2,
  /// A file descriptor (or blocking read) to sleep on completions.
  CapWaitFd = 1u << 3,
  /// Inline (copy-at-post) sends.
  CapInline = 1u << 4,
  /// Reliable-datagram links share the process's one endpoint per fabric.
  CapSharedEndpoint = 1u << 5,
};

/// A set of CapabilityBit values that must be treated as absent.
struct CapabilityMask {
  /// Bitwise OR of the CapabilityBit values switched off.
  uint32_t disabled = 0;

  /// True when `bit` is switched off.
  bool disables(CapabilityBit bit) const noexcept { return (disabled & bit) != 0; }

  /// Parse a comma-separated list of capability names
  /// ("remote_cq_data,atomics,virtual_addressing,wait_fd,inline,shared_endpoint"); an empty
  /// string is the empty mask. Throws Error(Config) naming the bad token and
  /// listing the valid names.
  static CapabilityMask parse(const std::string &list);

  /// The mask named by the environment variable RDMALIB_DISABLE_CAPS, or the
  /// empty mask when it is unset. Throws like parse().
  static CapabilityMask from_environment();

  /// Union of two masks.
  CapabilityMask operator|(CapabilityMask o) const noexcept { return {disabled | o.disabled}; }

  /// The canonical comma-separated names of the disabled bits ("" if none).
  std::string to_string() const;
};

/// Everything upper layers may ask about the fabric. Filled once by Fabric and
/// immutable afterwards; safe to read from any thread.
struct Capabilities {
  /// Connected (MSG) or reliable-datagram (RDM) endpoints: decides whether a Connection
  /// is an endpoint of its own or a link over a shared one.
  EndpointType endpoint = EndpointType::Connected;
  /// Who drives progress: with Manual, a side that neither polls nor waits stalls its
  /// peer.
  Progress progress = Progress::Auto;

  /// Write-with-immediate is delivered natively (the provider carries 32 bits of
  /// remote CQ data). When false, rdmalib emulates it with a write followed by a
  /// small notification message (see notify_message_size).
  bool remote_cq_data = false;
  /// Remote 64-bit atomics (fetch-and-add, compare-and-swap). When false, the
  /// atomic calls return Status::Unsupported and callers report with messages.
  bool atomics = false;
  /// Memory keys are chosen by the provider (verbs rkeys, FI_MR_PROV_KEY). When
  /// false rdmalib chooses keys itself: unique and unpredictable.
  bool provider_keys = false;
  /// RemoteBuffer::addr is the virtual address of the region. When false it is 0
  /// and every remote access is an offset into the region. Callers never need
  /// to care: they address remote memory as RemoteBuffer + offset.
  bool virtual_addressing = false;
  /// Local buffers need their registration descriptor in every post
  /// (FI_MR_LOCAL / verbs lkeys). rdmalib handles it; informational.
  bool local_registration = false;
  /// Memory regions must be bound to an endpoint before use (FI_MR_ENDPOINT):
  /// call Connection::attach() for every Buffer used on that connection.
  bool endpoint_bound_memory = false;
  /// A write-with-immediate consumes a posted receive at the target (verbs, and
  /// the emulation). Targets must then keep receives posted for notifications.
  bool write_consumes_receive = false;
  /// The smallest receive buffer able to take a write-with-immediate
  /// notification (0 when notifications carry no bytes).
  size_t notify_message_size = 0;
  /// Blocking waits sleep on a file descriptor / blocking CQ read instead of
  /// spinning. When false, Operations::wait polls with backoff.
  bool wait_fd = false;

  /// Largest payload that can be sent inline (copied at post time, buffer reusable
  /// immediately). 0 disables inline sends.
  size_t max_inline = 0;
  /// Largest single message or RMA transfer.
  size_t max_message = 0;
  /// Size in bytes of a memory key.
  size_t mr_key_size = 8;
  /// Private data that Connection setup can carry in each direction, in bytes.
  size_t max_private_data = 0;
  /// Reliable-datagram connections are links over one endpoint and one pair of completion queues
  /// per fabric (an address-vector entry and a link id each), so endpoints, memory and descriptors
  /// do not grow per peer. Only where the provider names each message's sender and matches
  /// receives by sender (FI_SOURCE, FI_DIRECTED_RECV): a link takes its peer's messages alone.
  /// When false every connection opens its own endpoint. Informational: same API either way.
  bool shared_endpoint = false;
  /// The provider opens new TCP sockets after links are up (a reliable-
  /// datagram layer over TCP connects to each peer at its first message and
  /// again after a loss). A process that forbids new sockets once its links
  /// are up (a seccomp filter) must allow TCP sockets where this is true.
  bool sockets_after_setup = false;

  /// One line listing every value, for the start-up log and rfaas-info.
  std::string describe() const;
};

} // namespace rdmalib
