// rdmalib's own messages on the data path, one framing for every backend.
//
// They travel as ordinary 16-byte messages on a connection: the
// notification of an emulated write-with-immediate (a write followed by a
// message, for fabrics without remote CQ data) and the goodbye that
// reliable-datagram links send on close (they have no connection manager to
// tell the peer), and on a shared libfabric endpoint the announcement of a
// large message. A receive completion of exactly 16 bytes that starts with
// kControlMagic is one of them; applications must not send exactly 16 bytes
// starting with that magic (docs/rdmalib.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <rdmalib/operations.hpp>

namespace rdmalib::detail {

constexpr uint32_t kControlMagic = 0x4e4d4452; // "RDMN" little-endian

enum class ControlType : uint16_t {
  /// Emulated write-with-immediate: the data of the write before it is in place.
  Notify = 1,
  /// The sender closed its end of the link. On a shared libfabric endpoint
  /// imm and length carry the link's handshake nonce (low, high half): the
  /// receiver takes the goodbye from a sender it cannot name yet.
  Goodbye = 2,
  /// libfabric, shared endpoint: a message longer than the receive pool's
  /// buffers follows, sent apart (imm: its sequence number, length: its
  /// size). rdmalib's own, never seen by a caller.
  Large = 3,
};

struct ControlMessage {
  uint32_t magic;
  uint16_t type;
  uint16_t reserved;
  /// Notify: the immediate value.
  uint32_t imm;
  /// Notify: the size of the write, because some providers report 0 for it.
  uint32_t length;
};
static_assert(sizeof(ControlMessage) == 16, "control message is 16 bytes on the wire");

inline ControlMessage control_message(ControlType type, uint32_t imm = 0,
                                      uint32_t length = 0) noexcept {
  return ControlMessage{kControlMagic, static_cast<uint16_t>(type), 0, imm, length};
}

/// If the `len` bytes at `buf` that a receive delivered are a control message,
/// turn completion `c` (context already set) into what it announces and
/// return true: RemoteWriteImm with the immediate and the write's size, or
/// PeerClosed with status Closed. False (and `c` unchanged) otherwise.
inline bool decode_control(const void *buf, size_t len, Completion &c) noexcept {
  if (len != sizeof(ControlMessage) || !buf)
    return false;
  ControlMessage m;
  std::memcpy(&m, buf, sizeof m);
  if (m.magic != kControlMagic)
    return false;
  if (m.type == static_cast<uint16_t>(ControlType::Notify)) {
    c.kind = OpKind::RemoteWriteImm;
    c.imm = m.imm;
    c.length = m.length;
    return true;
  }
  if (m.type == static_cast<uint16_t>(ControlType::Goodbye)) {
    c.kind = OpKind::PeerClosed;
    c.status = Status::Closed;
    c.length = 0;
    return true;
  }
  return false;
}

} // namespace rdmalib::detail
