// Validation of the resource-manager messages and the LeaseGrant overloads.
// See rm_messages.hpp.
#include "protocol/rm_messages.hpp"

#include <cstddef>
#include <cstring>

namespace rfaas::protocol {

namespace {

template <size_t N> bool terminated(const char (&field)[N]) noexcept {
  for (size_t i = 0; i < N; ++i)
    if (field[i] == '\0')
      return true;
  return false;
}

template <size_t N> bool filled(const char (&field)[N]) noexcept {
  return terminated(field) && field[0] != '\0';
}

} // namespace

const char *to_string(LeaseEndReason r) noexcept {
  switch (r) {
  case LeaseEndReason::Released:
    return "released";
  case LeaseEndReason::Expired:
    return "expired";
  case LeaseEndReason::Revoked:
    return "revoked";
  case LeaseEndReason::NodeDown:
    return "node_down";
  case LeaseEndReason::Renewed:
    return "renewed";
  }
  return "unknown_lease_end_reason";
}

WireResult NodeRegister::validate() const noexcept {
  if (cores == 0)
    return {WireError::InvalidField, 0, "NodeRegister.cores must be at least 1"};
  if (!filled(node))
    return {WireError::InvalidField, 0, "NodeRegister.node must be a non-empty terminated name"};
  if (!filled(address))
    return {WireError::InvalidField, 0,
            "NodeRegister.address must be a non-empty terminated address"};
  return {};
}

WireResult NodeRegistered::validate() const noexcept {
  if (!is_known(status))
    return {WireError::InvalidField, 0, "NodeRegistered.status is not an ErrorCode"};
  if (!terminated(message))
    return {WireError::InvalidField, 0, "NodeRegistered.message is not NUL-terminated"};
  if (status == ErrorCode::Ok && heartbeat_ms == 0)
    return {WireError::InvalidField, 0, "NodeRegistered.heartbeat_ms is 0"};
  return {};
}

WireResult LeaseRequest::validate() const noexcept {
  if (cores == 0)
    return {WireError::InvalidField, 0, "LeaseRequest.cores must be at least 1"};
  if (max_nodes == 0 || max_nodes > kMaxLeaseNodes)
    return {WireError::TooLarge, 0, "LeaseRequest.max_nodes must be 1..16"};
  if (!filled(client))
    return {WireError::InvalidField, 0, "LeaseRequest.client must be a non-empty terminated name"};
  if (!terminated(credential))
    return {WireError::InvalidField, 0, "LeaseRequest.credential is not NUL-terminated"};
  return {};
}

std::vector<uint8_t> lease_request_binding(const LeaseRequest &m) {
  static constexpr char kTag[] = "rfaas-lease-request-v6";
  constexpr size_t kFields = offsetof(LeaseRequest, credential);
  LeaseRequest bare = m;
  std::memset(bare.credential, 0, sizeof bare.credential);
  std::vector<uint8_t> out(sizeof kTag + sizeof(LeaseRequest), 0);
  std::memcpy(out.data(), kTag, sizeof kTag);
  // The wire encoding, not the struct's memory: the same bytes on every host
  // (an invalid request binds to zeros and is refused before it matters).
  if (!encode(bare, out.data() + sizeof kTag, sizeof(LeaseRequest)))
    std::memset(out.data() + sizeof kTag, 0, sizeof(LeaseRequest));
  out.resize(sizeof kTag + kFields);
  return out;
}

WireResult LeaseRenew::validate() const noexcept {
  if (lease_id == 0)
    return {WireError::InvalidField, 0, "LeaseRenew.lease_id is 0"};
  if (!filled(client))
    return {WireError::InvalidField, 0, "LeaseRenew.client must be a non-empty terminated name"};
  return {};
}

WireResult LeaseRelease::validate() const noexcept {
  if (lease_id == 0)
    return {WireError::InvalidField, 0, "LeaseRelease.lease_id is 0"};
  if (!filled(client))
    return {WireError::InvalidField, 0, "LeaseRelease.client must be a non-empty terminated name"};
  return {};
}

WireResult LeaseGrantPart::validate() const noexcept {
  if (cores == 0)
    return {WireError::InvalidField, 0, "LeaseGrantPart.cores must be at least 1"};
  if (!filled(node))
    return {WireError::InvalidField, 0, "LeaseGrantPart.node must be a non-empty terminated name"};
  if (!filled(address))
    return {WireError::InvalidField, 0,
            "LeaseGrantPart.address must be a non-empty terminated address"};
  return {};
}

WireResult LeaseGrant::validate() const noexcept {
  if (!is_known(status))
    return {WireError::InvalidField, 0, "LeaseGrant.status is not an ErrorCode"};
  if (!terminated(message))
    return {WireError::InvalidField, 0, "LeaseGrant.message is not NUL-terminated"};
  if (parts > kMaxLeaseNodes)
    return {WireError::TooLarge, 0, "LeaseGrant.parts must be at most 16"};
  if (status != ErrorCode::Ok && parts != 0)
    return {WireError::Inconsistent, 0, "LeaseGrant.parts must be 0 on an error"};
  if (status == ErrorCode::Ok && lease_id == 0)
    return {WireError::InvalidField, 0, "LeaseGrant.lease_id is 0"};
  return {};
}

uint64_t LeaseGrant::trailing_bytes() const noexcept {
  return static_cast<uint64_t>(parts) * sizeof(LeaseGrantPart);
}

namespace {
// A LeaseEnded alone or as an entry of a LeasesEnded: the same checks.
template <class M>
WireResult validate_lease_end(const M &m, const char *lease_zero, const char *bad_why) noexcept {
  if (m.lease_id == 0)
    return {WireError::InvalidField, 0, lease_zero};
  if (static_cast<uint16_t>(m.why) > kMaxLeaseEndReason)
    return {WireError::InvalidField, 0, bad_why};
  return {};
}
} // namespace

WireResult LeaseEnded::validate() const noexcept {
  return validate_lease_end(*this, "LeaseEnded.lease_id is 0",
                            "LeaseEnded.why is not a LeaseEndReason");
}

WireResult LeaseEndedEntry::validate() const noexcept {
  return validate_lease_end(*this, "LeaseEndedEntry.lease_id is 0",
                            "LeaseEndedEntry.why is not a LeaseEndReason");
}

WireResult LeasesEnded::validate() const noexcept {
  if (count == 0)
    return {WireError::InvalidField, 0, "LeasesEnded.count is 0"};
  if (count > kMaxLeasesEndedEntries)
    return {WireError::TooLarge, 0, "LeasesEnded.count must be at most 128"};
  return {};
}

uint64_t LeasesEnded::trailing_bytes() const noexcept {
  return static_cast<uint64_t>(count) * sizeof(LeaseEndedEntry);
}

WireResult AccountingReport::validate() const noexcept {
  if (lease_id == 0)
    return {WireError::InvalidField, 0, "AccountingReport.lease_id is 0"};
  if (final > 1)
    return {WireError::InvalidField, 0, "AccountingReport.final must be 0 or 1"};
  return {};
}

WireResult LeaseProof::validate() const noexcept {
  if (lease_id == 0)
    return {WireError::InvalidField, 0, "LeaseProof.lease_id is 0"};
  if (cores == 0)
    return {WireError::InvalidField, 0, "LeaseProof.cores must be at least 1"};
  if (!filled(client))
    return {WireError::InvalidField, 0, "LeaseProof.client must be a non-empty terminated name"};
  return {};
}

WireResult encode(const LeaseGrant &m, const std::vector<LeaseGrantPart> &parts, void *out,
                  size_t capacity) noexcept {
  WireResult v = m.validate();
  if (!v)
    return v;
  if (parts.size() != m.parts)
    return {WireError::Inconsistent, 0, "LeaseGrant needs exactly `parts` LeaseGrantParts"};
  for (const LeaseGrantPart &p : parts) {
    v = p.validate();
    if (!v)
      return v;
  }
  size_t total = lease_grant_size(m.parts);
  if (out == nullptr || capacity < total)
    return {WireError::BufferTooSmall, 0, "LeaseGrant with its parts"};
  WireResult head = detail::encode_fixed(m, out, capacity);
  if (!head)
    return head;
  detail::Writer w{static_cast<uint8_t *>(out) + sizeof(LeaseGrant)};
  for (const LeaseGrantPart &p : parts)
    w(p);
  return {WireError::Ok, total, ""};
}

WireResult decode(const void *in, size_t len, LeaseGrant &out, std::vector<LeaseGrantPart> &parts) {
  parts.clear();
  WireResult head = detail::decode_fixed(in, len, out);
  if (!head)
    return head;
  parts.assign(out.parts, LeaseGrantPart{});
  detail::Reader r{static_cast<const uint8_t *>(in) + sizeof(LeaseGrant)};
  for (uint32_t i = 0; i < out.parts; ++i) {
    r(parts[i]);
    WireResult v = parts[i].validate();
    if (!v) {
      parts.clear();
      return v;
    }
  }
  return head;
}

WireResult encode(const LeaseEnded *notices, size_t count, LeasesEnded &header, void *out,
                  size_t capacity) noexcept {
  if (notices == nullptr || count > kMaxLeasesEndedEntries)
    return {WireError::TooLarge, 0, "LeasesEnded.count must be at most 128"};
  header.count = static_cast<uint32_t>(count);
  WireResult v = header.validate();
  if (!v)
    return v;
  for (size_t i = 0; i < count; ++i) {
    v = notices[i].validate();
    if (!v)
      return v;
  }
  const size_t total = leases_ended_size(header.count);
  if (out == nullptr || capacity < total)
    return {WireError::BufferTooSmall, 0, "LeasesEnded with its entries"};
  WireResult head = detail::encode_fixed(header, out, capacity);
  if (!head)
    return head;
  detail::Writer w{static_cast<uint8_t *>(out) + sizeof(LeasesEnded)};
  for (size_t i = 0; i < count; ++i) {
    LeaseEndedEntry e;
    e.lease_id = notices[i].lease_id;
    e.expiry_ms = notices[i].expiry_ms;
    e.why = notices[i].why;
    w(e);
  }
  return {WireError::Ok, total, ""};
}

WireResult decode(const void *in, size_t len, LeasesEnded &out, std::vector<LeaseEnded> &notices) {
  WireResult head = detail::decode_fixed(in, len, out);
  if (!head)
    return head;
  const size_t first = notices.size();
  detail::Reader r{static_cast<const uint8_t *>(in) + sizeof(LeasesEnded)};
  for (uint32_t i = 0; i < out.count; ++i) {
    LeaseEndedEntry e;
    r(e);
    WireResult v = e.validate();
    if (!v) {
      notices.resize(first);
      return v;
    }
    LeaseEnded n;
    n.lease_id = e.lease_id;
    n.expiry_ms = e.expiry_ms;
    n.why = e.why;
    notices.push_back(n);
  }
  return head;
}

} // namespace rfaas::protocol
