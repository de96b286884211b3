// Out-of-line parts of the wire protocol: names, validation of the larger
// messages, and the AllocationRequest overloads. See protocol.hpp.
#include "protocol.hpp"

#include <cstring>

namespace rfaas::protocol {

namespace {

template <size_t N> bool terminated(const char (&field)[N]) noexcept {
  for (size_t i = 0; i < N; ++i)
    if (field[i] == '\0')
      return true;
  return false;
}

// The client's result descriptors must map one result slot to each input slot,
// in worker order.
WireResult check_results(const AllocationRequest &m, const BufferDescriptor &d,
                         uint32_t index) noexcept {
  WireResult v = d.validate();
  if (!v)
    return v;
  if (d.worker != index)
    return {WireError::Inconsistent, 0,
            "AllocationRequest result descriptor i must have worker == i"};
  if (d.slots < m.input_slots)
    return {WireError::Inconsistent, 0,
            "AllocationRequest result descriptor has fewer slots than input_slots"};
  if (d.slot_size < kSlotPrefix)
    return {WireError::Inconsistent, 0,
            "AllocationRequest result descriptor slot_size cannot hold the 64-byte header prefix"};
  return {};
}

} // namespace

const char *to_string(MessageType t) noexcept {
  switch (t) {
  case MessageType::ClientHello:
    return "client_hello";
  case MessageType::ExecutorHello:
    return "executor_hello";
  case MessageType::WorkerHello:
    return "worker_hello";
  case MessageType::ConnectReply:
    return "connect_reply";
  case MessageType::AllocationRequest:
    return "allocation_request";
  case MessageType::AllocationResponse:
    return "allocation_response";
  case MessageType::BufferAdvertisement:
    return "buffer_advertisement";
  case MessageType::CodeHeader:
    return "code_header";
  case MessageType::Ready:
    return "ready";
  case MessageType::Invocation:
    return "invocation";
  case MessageType::Result:
    return "result";
  case MessageType::Accounting:
    return "accounting";
  case MessageType::Shutdown:
    return "shutdown";
  case MessageType::NodeRegister:
    return "node_register";
  case MessageType::NodeRegistered:
    return "node_registered";
  case MessageType::Heartbeat:
    return "heartbeat";
  case MessageType::LeaseRequest:
    return "lease_request";
  case MessageType::LeaseRenew:
    return "lease_renew";
  case MessageType::LeaseRelease:
    return "lease_release";
  case MessageType::LeaseGrant:
    return "lease_grant";
  case MessageType::LeaseEnded:
    return "lease_ended";
  case MessageType::AccountingReport:
    return "accounting_report";
  case MessageType::LeaseProof:
    return "lease_proof";
  case MessageType::LeasesEnded:
    return "leases_ended";
  }
  return "unknown_message_type";
}

const char *to_string(ErrorCode c) noexcept {
  switch (c) {
  case ErrorCode::Ok:
    return "ok";
  case ErrorCode::UnknownFunction:
    return "unknown_function";
  case ErrorCode::PayloadTooLarge:
    return "payload_too_large";
  case ErrorCode::OutputTooLarge:
    return "output_too_large";
  case ErrorCode::FunctionCrashed:
    return "function_crashed";
  case ErrorCode::LeaseInvalid:
    return "lease_invalid";
  case ErrorCode::VersionMismatch:
    return "version_mismatch";
  case ErrorCode::Internal:
    return "internal";
  case ErrorCode::BadRequest:
    return "bad_request";
  case ErrorCode::ResourcesUnavailable:
    return "resources_unavailable";
  case ErrorCode::LibraryInvalid:
    return "library_invalid";
  case ErrorCode::ShuttingDown:
    return "shutting_down";
  case ErrorCode::Timeout:
    return "timeout";
  case ErrorCode::Provisioning:
    return "provisioning";
  }
  return "unknown_error_code";
}

const char *to_string(WireError e) noexcept {
  switch (e) {
  case WireError::Ok:
    return "ok";
  case WireError::Truncated:
    return "truncated";
  case WireError::BufferTooSmall:
    return "buffer too small";
  case WireError::BadMagic:
    return "bad magic (not an rFaaS message)";
  case WireError::VersionMismatch:
    return "protocol version mismatch";
  case WireError::UnexpectedType:
    return "unexpected message type";
  case WireError::UnknownType:
    return "unknown message type";
  case WireError::TooLarge:
    return "too large";
  case WireError::Inconsistent:
    return "inconsistent fields";
  case WireError::InvalidField:
    return "invalid field";
  }
  return "unknown wire error";
}

std::string describe(const WireResult &r) {
  std::string s = "protocol: ";
  s += to_string(r.error);
  if (r.detail && *r.detail) {
    s += ": ";
    s += r.detail;
  }
  return s;
}

ErrorCode reply_code(WireError e) noexcept {
  switch (e) {
  case WireError::Ok:
    return ErrorCode::Ok;
  case WireError::VersionMismatch:
    return ErrorCode::VersionMismatch;
  default:
    return ErrorCode::BadRequest;
  }
}

bool equal(const Token &a, const Token &b) noexcept {
  // No early exit: the time taken does not depend on where the tokens differ.
  uint8_t diff = 0;
  for (size_t i = 0; i < kTokenSize; ++i)
    diff = static_cast<uint8_t>(diff | (a.bytes[i] ^ b.bytes[i]));
  return diff == 0;
}

uint64_t library_checksum(const void *data, size_t size) noexcept {
  const auto *p = static_cast<const uint8_t *>(data);
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

WireResult AllocationRequest::validate() const noexcept {
  if (cores == 0)
    return {WireError::InvalidField, 0, "AllocationRequest.cores must be at least 1"};
  if (cores > kMaxWorkers)
    return {WireError::TooLarge, 0, "AllocationRequest.cores must be at most 256"};
  if (hot_timeout_ms < -1)
    return {WireError::InvalidField, 0, "AllocationRequest.hot_timeout_ms must be -1 or more"};
  if (input_slots == 0)
    return {WireError::InvalidField, 0, "AllocationRequest.input_slots must be at least 1"};
  if (input_slots > kMaxSlots)
    return {WireError::TooLarge, 0, "AllocationRequest.input_slots must be at most 256"};
  if (input_slot_size < kSlotPrefix)
    return {WireError::InvalidField, 0,
            "AllocationRequest.input_slot_size cannot hold the 64-byte header prefix"};
  if (input_slot_size > kMaxSlotSize)
    return {WireError::TooLarge, 0, "AllocationRequest.input_slot_size exceeds 2^30"};
  if (library_size == 0)
    return {WireError::InvalidField, 0, "AllocationRequest.library_size is 0"};
  if (library_size > kMaxLibrarySize)
    return {WireError::TooLarge, 0, "AllocationRequest.library_size exceeds 2^30"};
  if (!terminated(client_host))
    return {WireError::InvalidField, 0, "AllocationRequest.client_host is not NUL-terminated"};
  if (client_host[0] == '\0')
    return {WireError::InvalidField, 0, "AllocationRequest.client_host is empty"};
  // An opaque endpoint name ("ofi:...") is the whole address; a host needs a port.
  if (client_port == 0 && std::strncmp(client_host, "ofi:", 4) != 0)
    return {WireError::InvalidField, 0, "AllocationRequest.client_port is 0"};
  return {};
}

uint64_t AllocationRequest::trailing_bytes() const noexcept {
  return static_cast<uint64_t>(cores) * sizeof(BufferDescriptor);
}

WireResult AllocationResponse::validate() const noexcept {
  if (!is_known(status))
    return {WireError::InvalidField, 0, "AllocationResponse.status is not an ErrorCode"};
  if (!terminated(message))
    return {WireError::InvalidField, 0, "AllocationResponse.message is not NUL-terminated"};
  if (status == ErrorCode::Ok && (workers == 0 || workers > kMaxWorkers))
    return {WireError::TooLarge, 0, "AllocationResponse.workers must be 1..256"};
  return {};
}

WireResult ResultTarget::validate() const noexcept {
  if (capacity < sizeof(ResultHeader) || capacity > kMaxSlotSize)
    return {WireError::InvalidField, 0, "ResultTarget.capacity must be 16..2^30"};
  if (offset > target.size || target.size - offset < capacity)
    return {WireError::Inconsistent, 0, "ResultTarget.offset + capacity exceed the target"};
  return {};
}

WireResult CodeHeader::validate() const noexcept {
  if (library_size == 0)
    return {WireError::InvalidField, 0, "CodeHeader.library_size is 0"};
  if (library_size > kMaxLibrarySize)
    return {WireError::TooLarge, 0, "CodeHeader.library_size exceeds 2^30"};
  if (source.size < library_size)
    return {WireError::Inconsistent, 0, "CodeHeader.source is smaller than library_size"};
  if (!terminated(name))
    return {WireError::InvalidField, 0, "CodeHeader.name is not NUL-terminated"};
  return {};
}

WireResult Ready::validate() const noexcept {
  if (!is_known(status))
    return {WireError::InvalidField, 0, "Ready.status is not an ErrorCode"};
  if (worker >= kMaxWorkers)
    return {WireError::TooLarge, 0, "Ready.worker must be below 256"};
  if (!terminated(message))
    return {WireError::InvalidField, 0, "Ready.message is not NUL-terminated"};
  return {};
}

WireResult encode(const AllocationRequest &m, const std::vector<BufferDescriptor> &results,
                  void *out, size_t capacity) noexcept {
  WireResult v = m.validate();
  if (!v)
    return v;
  if (results.size() != m.cores)
    return {WireError::Inconsistent, 0,
            "AllocationRequest needs exactly one result descriptor per core"};
  for (uint32_t i = 0; i < m.cores; ++i) {
    v = check_results(m, results[i], i);
    if (!v)
      return v;
  }
  size_t total = allocation_request_size(m.cores);
  if (out == nullptr || capacity < total)
    return {WireError::BufferTooSmall, 0, "AllocationRequest with its descriptors"};
  WireResult head = detail::encode_fixed(m, out, capacity);
  if (!head)
    return head;
  detail::Writer w{static_cast<uint8_t *>(out) + sizeof(AllocationRequest)};
  for (const BufferDescriptor &d : results)
    w(d);
  return {WireError::Ok, total, ""};
}

WireResult decode(const void *in, size_t len, AllocationRequest &out,
                  std::vector<BufferDescriptor> &results) {
  results.clear();
  WireResult head = detail::decode_fixed(in, len, out);
  if (!head)
    return head;
  results.assign(out.cores, BufferDescriptor{});
  detail::Reader r{static_cast<const uint8_t *>(in) + sizeof(AllocationRequest)};
  for (uint32_t i = 0; i < out.cores; ++i) {
    r(results[i]);
    WireResult v = check_results(out, results[i], i);
    if (!v) {
      results.clear();
      return v;
    }
  }
  return head;
}

} // namespace rfaas::protocol
