// Fuzz target: what the executor manager does with the bytes it receives,
// driven without a network.
//
// The manager's handlers (Manager::accept_one, poll_clients, poll_executors,
// handle_allocation_request in server/executor_manager/manager.cpp) are member
// functions bound to live connections and registered buffers, so this target
// runs the layer they consist of for each kind of input, with the manager's own
// buffer sizes and dispatch:
//  * connection private data: peek, then ClientHello or ExecutorHello, and the
//    ConnectReply it answers with (reply_code of the failure);
//  * a message on a client connection, in a receive buffer of
//    kMaxAllocationRequestSize bytes, with the completion's length (and with 0,
//    as tcp reports): LeaseProof (with a resource manager), AllocationRequest
//    or Shutdown, else an error reply;
//  * a message from an executor, in a kControlMessageMax buffer: Accounting or
//    Shutdown;
//  * for an accepted AllocationRequest, the LaunchSpec the manager hands to
//    the executor it starts: serialized and parsed back, its request must
//    decode to the same allocation.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/launch_spec.hpp"
#include "fuzz_support.hpp"

namespace {

constexpr size_t kClientRecv = proto::kMaxAllocationRequestSize;
constexpr size_t kCtl = proto::kControlMessageMax;

void private_data(const uint8_t *data, size_t size) {
  proto::Header h;
  proto::WireResult r = proto::peek(data, size, h);
  proto::ConnectReply reply;
  uint8_t reply_bytes[sizeof reply];
  if (!r) {
    reply.status = proto::reply_code(r.error);
    FUZZ_CHECK(proto::encode(reply, reply_bytes, sizeof reply_bytes).ok());
    (void)proto::describe(r);
    return;
  }
  if (h.type == proto::MessageType::ClientHello) {
    proto::ClientHello hello;
    r = proto::decode(data, size, hello);
  } else if (h.type == proto::MessageType::ExecutorHello) {
    proto::ExecutorHello hello;
    r = proto::decode(data, size, hello);
    if (r) {
      proto::Token secret;
      (void)proto::equal(secret, hello.secret);
    }
  }
  reply.status = r ? proto::ErrorCode::Ok : proto::reply_code(r.error);
  FUZZ_CHECK(proto::encode(reply, reply_bytes, sizeof reply_bytes).ok());
}

void launch_spec(const uint8_t *msg, const proto::WireResult &r,
                 const proto::AllocationRequest &req,
                 const std::vector<proto::BufferDescriptor> &results) {
  rfaas::server::LaunchSpec spec;
  spec.allocation_id = 0x1234abcd5678ef00ull;
  for (uint32_t i = 0; i < req.cores; ++i)
    spec.cores.push_back(static_cast<int>(i));
  spec.memory_mib = req.memory_mib;
  spec.device.name = "fuzz";
  spec.manager_host = "127.0.0.1";
  spec.manager_port = 1;
  spec.request.assign(msg, msg + r.size);
  rfaas::server::LaunchSpec parsed = rfaas::server::LaunchSpec::parse(spec.serialize());
  FUZZ_CHECK(parsed.request == spec.request);
  FUZZ_CHECK(parsed.cores == spec.cores);
  proto::AllocationRequest again;
  std::vector<proto::BufferDescriptor> results_again;
  proto::WireResult r2 =
      proto::decode(parsed.request.data(), parsed.request.size(), again, results_again);
  FUZZ_CHECK(r2.ok() && r2.size == r.size);
  FUZZ_CHECK(again.cores == req.cores && results_again.size() == results.size());
  FUZZ_CHECK(std::memcmp(again.client_host, req.client_host, sizeof req.client_host) == 0);
}

void client_message(const uint8_t *buffer, size_t len) {
  proto::Header h;
  proto::WireResult r = proto::peek(buffer, len, h);
  if (r && h.type == proto::MessageType::AllocationRequest) {
    proto::AllocationRequest req;
    std::vector<proto::BufferDescriptor> results;
    r = proto::decode(buffer, len, req, results);
    if (!r) {
      proto::AllocationResponse resp;
      resp.status = proto::reply_code(r.error);
      proto::set_text_truncated(resp.message, proto::describe(r));
      uint8_t out[kCtl];
      FUZZ_CHECK(proto::encode(resp, out, sizeof out).ok());
      return;
    }
    FUZZ_CHECK(r.size <= len);
    // The manager's own checks read these; decode() must have bounded them.
    FUZZ_CHECK(req.cores >= 1 && req.cores <= proto::kMaxWorkers);
    FUZZ_CHECK(!proto::get_text(req.client_host).empty());
    FUZZ_CHECK(proto::get_text(req.client_host).size() < proto::kHostCapacity);
    FUZZ_CHECK(results.size() == req.cores);
    launch_spec(buffer, r, req, results);
  } else if (r && h.type == proto::MessageType::LeaseProof) {
    // Manager::check_lease: the lease's fields the token covers.
    proto::LeaseProof proof;
    r = proto::decode(buffer, len, proof);
    if (r) {
      FUZZ_CHECK(r.size <= len);
      FUZZ_CHECK(proto::get_text(proof.client).size() < proto::kNameCapacity);
    } else {
      (void)proto::describe(r);
      (void)proto::reply_code(r.error);
    }
  } else if (!r) {
    (void)proto::describe(r);
    (void)proto::reply_code(r.error);
  }
}

void executor_message(const uint8_t *buffer) {
  proto::Header h;
  proto::WireResult r = proto::peek(buffer, kCtl, h);
  if (r && h.type == proto::MessageType::Accounting) {
    proto::Accounting acc;
    r = proto::decode(buffer, kCtl, acc);
    if (r)
      FUZZ_CHECK(acc.worker == proto::kAllWorkers || acc.worker < proto::kMaxWorkers);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // Private data arrives as a vector of exactly what the peer sent.
  private_data(data, size);

  // A client connection's receive buffer: the message, then what was there.
  std::vector<uint8_t> buffer(kClientRecv, 0);
  size_t n = std::min(size, kClientRecv);
  if (n > 0)
    std::memcpy(buffer.data(), data, n);
  client_message(buffer.data(), n);           // the completion's length
  client_message(buffer.data(), kClientRecv); // length 0 reported (tcp): the whole buffer

  // An executor connection's receive buffer (kCtl bytes, always read whole).
  std::vector<uint8_t> ctl(kCtl, 0);
  if (size > 0)
    std::memcpy(ctl.data(), data, std::min(size, kCtl));
  executor_message(ctl.data());
  return 0;
}
