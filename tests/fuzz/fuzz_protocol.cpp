// Fuzz target: every decoder of the wire protocol (rfaas/protocol).
//
// The input is the bytes of one received message. Every decode() overload
// runs on it (all but the one whose type matches stop at the header), and for
// each message that decodes the target checks the properties the rest of the
// code relies on:
//  * decode() reports a size within the input and at least the fixed part;
//  * what decode() accepts, encode() accepts (validate() agrees both ways);
//  * encode(decode(x)) decodes to the same message (a stable round trip);
//  * peek() agrees with decode() about the header.
// For the slot-resident headers, which carry no Header, the input is the slot
// from where the header starts (as the executor and the client read them),
// so `size` is also the room to the slot's end; decode_input_slot() reads the
// input as a whole input slot.
#include <cstring>
#include <vector>

#include "fuzz_support.hpp"

namespace {

template <class M> std::vector<uint8_t> encoded(const M &m, size_t capacity) {
  std::vector<uint8_t> out(capacity < sizeof(M) ? sizeof(M) : capacity);
  proto::WireResult w = proto::encode(m, out.data(), capacity);
  FUZZ_CHECK(w.ok());
  FUZZ_CHECK(w.size == sizeof(M));
  out.resize(sizeof(M));
  return out;
}

template <class M>
void one(const uint8_t *data, size_t size, const proto::Header &peeked, bool peek_ok) {
  M m;
  proto::WireResult r = proto::decode(data, size, m);
  if (!r) {
    FUZZ_CHECK(r.size == 0);
    FUZZ_CHECK(r.detail != nullptr);
    (void)proto::describe(r);
    (void)proto::reply_code(r.error);
    return;
  }
  if constexpr (proto::detail::has_header<M>::value)
    FUZZ_CHECK(peek_ok && peeked.type == M::kType);
  FUZZ_CHECK(r.size >= sizeof(M) && r.size <= size);
  FUZZ_CHECK(m.validate().ok());
  // In a slot the capacity is the slot; elsewhere the fixed part suffices.
  size_t capacity = proto::detail::in_slot<M>::value ? size : sizeof(M);
  std::vector<uint8_t> first = encoded(m, capacity);
  // The fixed part of the input and its re-encoding differ only in reserved fields
  // (written as zero): a second round trip must be exact.
  first.resize(capacity);
  M again;
  proto::WireResult r2 = proto::decode(first.data(), first.size(), again);
  FUZZ_CHECK(r2.ok());
  FUZZ_CHECK(r2.size == r.size);
  std::vector<uint8_t> second = encoded(again, capacity);
  first.resize(sizeof(M));
  FUZZ_CHECK(first == second);
}

/// The input as a whole input slot: an accepted invocation's payload lies in
/// the slot, and a result target it sends lies inside the region it names
/// (offset + capacity computed without overflow) and holds the header.
void input_slot(const uint8_t *data, size_t size) {
  proto::InvocationHeader m;
  proto::ResultTarget t;
  t.capacity = 1; // not a valid target: must not survive a kWithTarget decode
  proto::WireResult r = proto::decode_input_slot(data, size, m, t);
  if (!r)
    return;
  FUZZ_CHECK(r.size == proto::kSlotPrefix + uint64_t(m.payload_size) && r.size <= size);
  if (!(m.flags & proto::kWithTarget)) {
    FUZZ_CHECK(t.capacity == 1);
    return;
  }
  FUZZ_CHECK(t.capacity >= proto::kResultHeaderSize);
  FUZZ_CHECK(t.capacity <= proto::kMaxSlotSize);
  FUZZ_CHECK(t.offset <= t.target.size && t.target.size - t.offset >= t.capacity);
  // What the client writes for it reads back the same.
  std::vector<uint8_t> again(size);
  const size_t headers = proto::encode_input_headers(again.data() + proto::kSlotPrefix, m, t);
  FUZZ_CHECK(headers == proto::kInvocationHeaderSize + proto::kResultTargetSize);
  proto::InvocationHeader m2;
  proto::ResultTarget t2;
  FUZZ_CHECK(proto::decode_input_slot(again.data(), again.size(), m2, t2).ok());
  FUZZ_CHECK(t2 == t && m2.invocation_id == m.invocation_id && m2.flags == m.flags);
}

void allocation_request(const uint8_t *data, size_t size, const proto::Header &peeked,
                        bool peek_ok) {
  proto::AllocationRequest m;
  std::vector<proto::BufferDescriptor> results;
  proto::WireResult r = proto::decode(data, size, m, results);
  if (!r) {
    FUZZ_CHECK(results.empty());
    (void)proto::describe(r);
    return;
  }
  FUZZ_CHECK(peek_ok && peeked.type == proto::MessageType::AllocationRequest);
  FUZZ_CHECK(r.size == proto::allocation_request_size(m.cores) && r.size <= size);
  FUZZ_CHECK(results.size() == m.cores);
  std::vector<uint8_t> first(r.size);
  proto::WireResult w = proto::encode(m, results, first.data(), first.size());
  FUZZ_CHECK(w.ok() && w.size == r.size);
  // One byte short must be refused, not overrun.
  FUZZ_CHECK(!proto::encode(m, results, first.data(), first.size() - 1));
  proto::AllocationRequest again;
  std::vector<proto::BufferDescriptor> results_again;
  FUZZ_CHECK(proto::decode(first.data(), first.size(), again, results_again).ok());
  std::vector<uint8_t> second(r.size);
  FUZZ_CHECK(proto::encode(again, results_again, second.data(), second.size()).ok());
  FUZZ_CHECK(first == second);
}

void lease_grant(const uint8_t *data, size_t size, const proto::Header &peeked, bool peek_ok) {
  proto::LeaseGrant m;
  std::vector<proto::LeaseGrantPart> parts;
  proto::WireResult r = proto::decode(data, size, m, parts);
  if (!r) {
    FUZZ_CHECK(parts.empty());
    (void)proto::describe(r);
    return;
  }
  FUZZ_CHECK(peek_ok && peeked.type == proto::MessageType::LeaseGrant);
  FUZZ_CHECK(r.size == proto::lease_grant_size(m.parts) && r.size <= size);
  FUZZ_CHECK(parts.size() == m.parts && m.parts <= proto::kMaxLeaseNodes);
  std::vector<uint8_t> first(r.size);
  proto::WireResult w = proto::encode(m, parts, first.data(), first.size());
  FUZZ_CHECK(w.ok() && w.size == r.size);
  FUZZ_CHECK(!proto::encode(m, parts, first.data(), first.size() - 1));
  proto::LeaseGrant again;
  std::vector<proto::LeaseGrantPart> parts_again;
  FUZZ_CHECK(proto::decode(first.data(), first.size(), again, parts_again).ok());
  std::vector<uint8_t> second(r.size);
  FUZZ_CHECK(proto::encode(again, parts_again, second.data(), second.size()).ok());
  FUZZ_CHECK(first == second);
}

void leases_ended(const uint8_t *data, size_t size, const proto::Header &peeked, bool peek_ok) {
  proto::LeasesEnded m;
  std::vector<proto::LeaseEnded> notices;
  proto::WireResult r = proto::decode(data, size, m, notices);
  if (!r) {
    FUZZ_CHECK(notices.empty());
    (void)proto::describe(r);
    return;
  }
  FUZZ_CHECK(peek_ok && peeked.type == proto::MessageType::LeasesEnded);
  FUZZ_CHECK(r.size == proto::leases_ended_size(m.count) && r.size <= size);
  FUZZ_CHECK(notices.size() == m.count && m.count <= proto::kMaxLeasesEndedEntries);
  std::vector<uint8_t> first(r.size);
  proto::LeasesEnded head;
  proto::WireResult w =
      proto::encode(notices.data(), notices.size(), head, first.data(), first.size());
  FUZZ_CHECK(w.ok() && w.size == r.size);
  FUZZ_CHECK(!proto::encode(notices.data(), notices.size(), head, first.data(), first.size() - 1));
  proto::LeasesEnded again;
  std::vector<proto::LeaseEnded> notices_again;
  FUZZ_CHECK(proto::decode(first.data(), first.size(), again, notices_again).ok());
  std::vector<uint8_t> second(r.size);
  FUZZ_CHECK(
      proto::encode(notices_again.data(), notices_again.size(), again, second.data(), second.size())
          .ok());
  FUZZ_CHECK(first == second);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  proto::Header h;
  bool peek_ok = proto::peek(data, size, h).ok();
  one<proto::ClientHello>(data, size, h, peek_ok);
  one<proto::ExecutorHello>(data, size, h, peek_ok);
  one<proto::WorkerHello>(data, size, h, peek_ok);
  one<proto::ConnectReply>(data, size, h, peek_ok);
  allocation_request(data, size, h, peek_ok);
  one<proto::AllocationResponse>(data, size, h, peek_ok);
  one<proto::BufferAdvertisement>(data, size, h, peek_ok);
  one<proto::CodeHeader>(data, size, h, peek_ok);
  one<proto::Ready>(data, size, h, peek_ok);
  one<proto::InvocationHeader>(data, size, h, peek_ok);
  one<proto::ResultTarget>(data, size, h, peek_ok);
  input_slot(data, size);
  one<proto::ResultHeader>(data, size, h, peek_ok);
  one<proto::Accounting>(data, size, h, peek_ok);
  one<proto::Shutdown>(data, size, h, peek_ok);
  one<proto::NodeRegister>(data, size, h, peek_ok);
  one<proto::NodeRegistered>(data, size, h, peek_ok);
  one<proto::Heartbeat>(data, size, h, peek_ok);
  one<proto::LeaseRequest>(data, size, h, peek_ok);
  one<proto::LeaseRenew>(data, size, h, peek_ok);
  one<proto::LeaseRelease>(data, size, h, peek_ok);
  lease_grant(data, size, h, peek_ok);
  one<proto::LeaseEnded>(data, size, h, peek_ok);
  leases_ended(data, size, h, peek_ok);
  one<proto::AccountingReport>(data, size, h, peek_ok);
  one<proto::LeaseProof>(data, size, h, peek_ok);
  if (peek_ok) {
    FUZZ_CHECK(proto::is_known(h.type));
    (void)proto::to_string(h.type);
  }
  // The immediate of a slot write: parse, rebuild, parse again.
  if (size >= 4) {
    uint32_t imm;
    std::memcpy(&imm, data, 4);
    proto::Immediate im = proto::parse_immediate(imm);
    FUZZ_CHECK(im.slot < proto::kMaxSlots);
    // A result written in place carries the marker instead of a status.
    FUZZ_CHECK((im.in_place ? proto::make_in_place_immediate(im.slot, im.sequence)
                            : proto::make_immediate(im.slot, im.sequence, im.status)) == imm);
    FUZZ_CHECK(!im.in_place || im.status == proto::ErrorCode::Ok);
    FUZZ_CHECK(proto::immediate_matches(imm, im.sequence));
  }
  return 0;
}
