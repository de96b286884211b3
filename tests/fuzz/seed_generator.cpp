// Writes the binary seed inputs of tests/fuzz/corpus/ by encoding real
// messages with the protocol's own encoder, so the seeds follow the protocol
// when it changes (run it again and commit the result):
//   fuzz_seed_generator tests/fuzz/corpus
// The JSON and ELF seeds are plain files kept next to them.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "common/launch_spec.hpp"
#include "fuzz_support.hpp"

namespace {

std::string g_root;
int g_failures = 0;

void write(const std::string &target, const std::string &name, const std::vector<uint8_t> &bytes) {
  std::string path = g_root + "/" + target + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char *>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s (does the directory exist?)\n", path.c_str());
    ++g_failures;
  }
}

template <class M> std::vector<uint8_t> bytes_of(const M &m, size_t capacity = sizeof(M)) {
  std::vector<uint8_t> out(capacity);
  proto::WireResult r = proto::encode(m, out.data(), out.size());
  if (!r) {
    std::fprintf(stderr, "cannot encode %s: %s\n", M::kName, proto::describe(r).c_str());
    ++g_failures;
  }
  return out;
}

proto::BufferDescriptor descriptor(uint32_t worker, uint32_t slots, uint32_t slot_size) {
  proto::BufferDescriptor d;
  d.buffer = {0x7f0000001000ull + worker * 0x10000ull, 0x100 + worker, uint64_t(slots) * slot_size};
  d.worker = worker;
  d.slots = slots;
  d.slot_size = slot_size;
  return d;
}

std::vector<uint8_t> allocation_request(uint32_t cores, uint32_t slots) {
  proto::AllocationRequest m;
  m.cores = cores;
  m.memory_mib = 128;
  m.hot_timeout_ms = 10;
  m.input_slots = slots;
  m.input_slot_size = 4096;
  m.client_port = 40000;
  m.library_size = 16384;
  m.library_checksum = 0x0123456789abcdefull;
  proto::set_text(m.client_host, "127.0.0.1");
  std::vector<proto::BufferDescriptor> results;
  for (uint32_t i = 0; i < cores; ++i)
    results.push_back(descriptor(i, slots, 4096));
  std::vector<uint8_t> out(proto::allocation_request_size(cores));
  proto::WireResult r = proto::encode(m, results, out.data(), out.size());
  if (!r) {
    std::fprintf(stderr, "cannot encode AllocationRequest: %s\n", proto::describe(r).c_str());
    ++g_failures;
  }
  return out;
}

std::vector<uint8_t> text(const std::string &s) { return std::vector<uint8_t>(s.begin(), s.end()); }

} // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  g_root = argv[1];

  proto::ClientHello client_hello;
  client_hello.lease_id = 42;
  for (size_t i = 0; i < proto::kTokenSize; ++i)
    client_hello.token.bytes[i] = static_cast<uint8_t>(i);
  proto::ExecutorHello executor_hello;
  executor_hello.allocation_id = 0x1122334455667788ull;
  proto::WorkerHello worker_hello;
  worker_hello.allocation_id = 7;
  worker_hello.worker = 1;
  worker_hello.workers = 2;
  proto::ConnectReply reply;
  proto::ConnectReply refused;
  refused.status = proto::ErrorCode::VersionMismatch;
  proto::AllocationResponse response;
  response.allocation_id = 9;
  response.workers = 2;
  proto::AllocationResponse error_response;
  error_response.status = proto::ErrorCode::ResourcesUnavailable;
  proto::set_text(error_response.message, "4 cores requested, 2 free");
  proto::BufferAdvertisement adv;
  adv.descriptor = descriptor(0, 4, 4096);
  proto::BufferAdvertisement record;
  record.descriptor = descriptor(0, 1, sizeof(proto::AccountingCounters));
  record.descriptor.worker = proto::kAllWorkers;
  proto::CodeHeader code;
  code.library_size = 16384;
  code.checksum = 0x0123456789abcdefull;
  code.source = {0x7f0000100000ull, 0x55, 16384};
  proto::set_text(code.name, "libfunctions.so");
  proto::Ready ready;
  ready.worker = 1;
  ready.function_count = 3;
  // Input slots as the worker holds them: the headers end kSlotPrefix in.
  proto::InvocationHeader invocation;
  invocation.invocation_id = 0x10000001u;
  invocation.function = proto::function_hash("echo");
  invocation.payload_size = 8;
  invocation.slot = 3;
  std::vector<uint8_t> invocation_slot(proto::kSlotPrefix + 8);
  for (size_t i = 0; i < 8; ++i)
    invocation_slot[proto::kSlotPrefix + i] = static_cast<uint8_t>('a' + i);
  std::vector<uint8_t> invocation_target = invocation_slot;
  proto::encode_input_headers(invocation_slot.data() + proto::kSlotPrefix, invocation, {});
  // With a result target: the prefix of a client's block.
  proto::InvocationHeader targeted = invocation;
  targeted.flags = proto::kWithTarget;
  proto::ResultTarget target;
  target.target = {0x7f0000200000ull, 0x1234, 4096 + 64};
  target.offset = 48;
  target.capacity = 16 + 4096;
  proto::encode_input_headers(invocation_target.data() + proto::kSlotPrefix, targeted, target);
  // The same target one byte past its region: refused.
  std::vector<uint8_t> invocation_target_outside = invocation_target;
  invocation_target_outside[proto::kSlotPrefix - proto::kInvocationHeaderSize -
                            proto::kResultTargetSize + 24] = 49; // offset, little-endian
  proto::ResultHeader result;
  result.invocation_id = 5;
  result.output_size = 4;
  result.slot = 1;
  std::vector<uint8_t> result_slot = bytes_of(result, 32);
  proto::Accounting accounting;
  accounting.allocation_id = 0x1122334455667788ull;
  accounting.counters = {1000, 200, 300, 4};
  proto::Shutdown shutdown;
  shutdown.allocation_id = 3;
  shutdown.reason = proto::ErrorCode::ShuttingDown;

  // Edge cases shared by the binary targets: a bare header, a header of another
  // version, an unknown type, a truncated message.
  proto::Header header;
  std::vector<uint8_t> bare(8);
  proto::detail::Writer w{bare.data()};
  proto::Header::fields(static_cast<const proto::Header &>(header), w);
  std::vector<uint8_t> v2 = bytes_of(client_hello);
  v2[4] = 1; // a peer of version 1, before result targets
  std::vector<uint8_t> unknown = bytes_of(shutdown);
  unknown[6] = 99;
  std::vector<uint8_t> truncated = allocation_request(2, 4);
  truncated.resize(truncated.size() - 8);

  const char *p = "protocol";
  write(p, "client_hello", bytes_of(client_hello));
  write(p, "executor_hello", bytes_of(executor_hello));
  write(p, "worker_hello", bytes_of(worker_hello));
  write(p, "connect_reply", bytes_of(reply));
  write(p, "connect_reply_refused", bytes_of(refused));
  write(p, "allocation_request_1", allocation_request(1, 1));
  write(p, "allocation_request_4", allocation_request(4, 16));
  write(p, "allocation_request_truncated", truncated);
  write(p, "allocation_response", bytes_of(response));
  write(p, "allocation_response_error", bytes_of(error_response));
  write(p, "buffer_advertisement", bytes_of(adv));
  write(p, "code_header", bytes_of(code));
  write(p, "ready", bytes_of(ready));
  write(p, "invocation_slot", invocation_slot);
  write(p, "invocation_target", invocation_target);
  write(p, "invocation_target_outside", invocation_target_outside);
  write(p, "result_slot", result_slot);
  write(p, "accounting", bytes_of(accounting));
  write(p, "shutdown", bytes_of(shutdown));
  // Resource-manager messages, as the current protocol fills them: lease
  // secrets in renew and release, MUNGE credentials in requests, owners in
  // grant parts and lease proofs.
  auto filled = [](proto::Token &t, uint8_t first) {
    for (size_t i = 0; i < proto::kTokenSize; ++i)
      t.bytes[i] = static_cast<uint8_t>(first + i);
  };
  proto::NodeRegister node_register;
  node_register.cores = 8;
  node_register.memory_mib = 65536;
  node_register.timestamp_ms = 1'790'000'000'000ull;
  filled(node_register.proof, 0x40);
  proto::set_text(node_register.node, "node-a");
  proto::set_text(node_register.address, "10.0.0.1:10000");
  proto::NodeRegistered node_registered;
  node_registered.heartbeat_ms = 1000;
  node_registered.now_ms = 1'790'000'000'123ull;
  proto::NodeRegistered node_refused = node_registered;
  node_refused.status = proto::ErrorCode::LeaseInvalid;
  proto::set_text(node_refused.message, "registration proof does not match node-a's secret");
  proto::Heartbeat heartbeat;
  heartbeat.sequence = 3;
  heartbeat.allocations = 2;
  proto::LeaseRequest lease_request;
  lease_request.cores = 4;
  lease_request.max_nodes = 2;
  lease_request.memory_mib = 1024;
  lease_request.duration_ms = 60000;
  proto::set_text(lease_request.client, "alice@login1");
  // Anonymous (auth none): no credential. With one: munged's base64 text
  // (the length of a real credential for this payload), and one that fills
  // the field without its terminating NUL (refused).
  proto::LeaseRequest lease_request_munge = lease_request;
  std::string credential = "MUNGE:AwQFAAB";
  while (credential.size() < 300)
    credential += "Yx9Jc1P0mQkLr2Zb+7vT/";
  credential.resize(300);
  credential += ":";
  proto::set_text(lease_request_munge.credential, credential);
  proto::LeaseRequest lease_request_unterminated = lease_request;
  std::memset(lease_request_unterminated.credential, 'A', proto::kCredentialCapacity);
  proto::LeaseRenew lease_renew;
  lease_renew.lease_id = 77;
  lease_renew.duration_ms = 30000;
  filled(lease_renew.secret, 0x90);
  proto::set_text(lease_renew.client, "alice@login1");
  proto::LeaseRelease lease_release;
  lease_release.lease_id = 77;
  filled(lease_release.secret, 0x90);
  proto::set_text(lease_release.client, "alice@login1");
  proto::LeaseGrant grant;
  grant.lease_id = 77;
  grant.parts = 2;
  grant.expiry_ms = 1'790'000'060'000ull;
  filled(grant.secret, 0x90);
  std::vector<proto::LeaseGrantPart> parts(2);
  for (size_t i = 0; i < parts.size(); ++i) {
    parts[i].cores = 2;
    parts[i].owner_uid = 1000;
    parts[i].memory_mib = 512;
    filled(parts[i].token, static_cast<uint8_t>(0x10 * (i + 1)));
    proto::set_text(parts[i].node, i == 0 ? "node-a" : "node-b");
    proto::set_text(parts[i].address, i == 0 ? "10.0.0.1:10000" : "10.0.0.2:10000");
  }
  std::vector<uint8_t> grant_bytes(proto::lease_grant_size(2));
  proto::encode(grant, parts, grant_bytes.data(), grant_bytes.size());
  // Answers without parts: a release, a refusal naming its reason, and a
  // "provisioning" wait (expiry_ms is the time to wait).
  auto grant_without_parts = [&](proto::ErrorCode status, uint64_t expiry_ms,
                                 const std::string &message) {
    proto::LeaseGrant g;
    g.status = status;
    g.lease_id = status == proto::ErrorCode::Ok ? 77 : 0;
    g.expiry_ms = expiry_ms;
    proto::set_text(g.message, message);
    std::vector<uint8_t> out(proto::lease_grant_size(0));
    proto::WireResult r = proto::encode(g, {}, out.data(), out.size());
    if (!r) {
      std::fprintf(stderr, "cannot encode LeaseGrant: %s\n", proto::describe(r).c_str());
      ++g_failures;
    }
    return out;
  };
  proto::LeaseEnded lease_ended;
  lease_ended.lease_id = 77;
  lease_ended.expiry_ms = 1'790'000'060'000ull;
  lease_ended.why = proto::LeaseEndReason::Expired;
  proto::LeaseEnded lease_renewed = lease_ended;
  lease_renewed.why = proto::LeaseEndReason::Renewed;
  lease_renewed.expiry_ms += 30000;
  // Three ends at once, as a resource manager sends what ended while its
  // last message to the node was in flight.
  std::vector<proto::LeaseEnded> ends(3, lease_ended);
  ends[1].lease_id = 78;
  ends[1].why = proto::LeaseEndReason::Released;
  ends[2].lease_id = 79;
  ends[2].why = proto::LeaseEndReason::Renewed;
  std::vector<uint8_t> leases_ended_bytes(proto::leases_ended_size(3));
  proto::LeasesEnded leases_ended_header;
  if (!proto::encode(ends.data(), ends.size(), leases_ended_header, leases_ended_bytes.data(),
                     leases_ended_bytes.size())) {
    std::fprintf(stderr, "cannot encode LeasesEnded\n");
    ++g_failures;
  }
  proto::AccountingReport report;
  report.lease_id = 77;
  report.allocation_us = 5'000'000;
  report.hot_polling_us = 1'000'000;
  report.execution_us = 250'000;
  report.memory_mib = 512;
  report.final = 1;
  proto::LeaseProof proof;
  proof.lease_id = 77;
  proof.expiry_ms = 1'790'000'060'000ull;
  proof.memory_mib = 512;
  proof.cores = 2;
  proof.owner_uid = 1000;
  filled(proof.token, 0x10);
  proto::set_text(proof.client, "alice@login1");
  proto::LeaseProof proof_anonymous = proof;
  proof_anonymous.owner_uid = proto::kAnonymousUid;
  write(p, "node_register", bytes_of(node_register));
  write(p, "node_registered", bytes_of(node_registered));
  write(p, "node_registered_refused", bytes_of(node_refused));
  write(p, "heartbeat", bytes_of(heartbeat));
  write(p, "lease_request", bytes_of(lease_request));
  write(p, "lease_request_munge", bytes_of(lease_request_munge));
  // What encode() refuses, as a peer could still send it.
  std::vector<uint8_t> unterminated = bytes_of(lease_request);
  std::memcpy(unterminated.data() + offsetof(proto::LeaseRequest, credential),
              lease_request_unterminated.credential, proto::kCredentialCapacity);
  write(p, "lease_request_credential_unterminated", unterminated);
  write(p, "lease_renew", bytes_of(lease_renew));
  write(p, "lease_release", bytes_of(lease_release));
  write(p, "lease_grant_2", grant_bytes);
  write(p, "lease_grant_released", grant_without_parts(proto::ErrorCode::Ok, 0, ""));
  write(p, "lease_grant_refused",
        grant_without_parts(proto::ErrorCode::LeaseInvalid, 0,
                            "replayed MUNGE credential (each credential is good for one request)"));
  write(p, "lease_grant_provisioning",
        grant_without_parts(proto::ErrorCode::Provisioning, 2000, "a node is being provisioned"));
  write(p, "lease_ended", bytes_of(lease_ended));
  write(p, "lease_ended_renewed", bytes_of(lease_renewed));
  write(p, "leases_ended_3", leases_ended_bytes);
  write(p, "accounting_report", bytes_of(report));
  write(p, "lease_proof", bytes_of(proof));
  write(p, "lease_proof_anonymous", bytes_of(proof_anonymous));
  write(p, "header_only", bare);
  write(p, "version_1", v2);
  write(p, "unknown_type", unknown);

  const char *m = "manager_messages";
  write(m, "client_hello", bytes_of(client_hello));
  write(m, "executor_hello", bytes_of(executor_hello));
  write(m, "allocation_request_1", allocation_request(1, 1));
  write(m, "allocation_request_8", allocation_request(8, 4));
  write(m, "allocation_request_truncated", truncated);
  write(m, "lease_proof", bytes_of(proof));
  write(m, "accounting", bytes_of(accounting));
  write(m, "shutdown", bytes_of(shutdown));
  write(m, "version_1", v2);
  write(m, "unknown_type", unknown);

  const char *e = "executor_messages";
  rfaas::server::LaunchSpec spec;
  spec.allocation_id = 0x1122334455667788ull;
  spec.cores = {1, 2};
  spec.memory_mib = 128;
  spec.device.name = "lo-tcp";
  spec.device.provider = "tcp";
  spec.device.ip_address = "127.0.0.1";
  spec.manager_host = "127.0.0.1";
  spec.manager_port = 10000;
  spec.request = allocation_request(2, 4);
  write(e, "launch_spec", text(spec.serialize()));
  spec.request = allocation_request(3, 1); // three cores for two CPUs
  write(e, "launch_spec_core_mismatch", text(spec.serialize()));
  write(e, "launch_spec_truncated", text(spec.serialize().substr(0, 120)));
  write(e, "connect_reply", bytes_of(reply));
  write(e, "connect_reply_refused", bytes_of(refused));
  write(e, "code_header", bytes_of(code));
  write(e, "buffer_advertisement", bytes_of(record));
  write(e, "invocation_slot", invocation_slot);
  write(e, "invocation_target", invocation_target);
  write(e, "invocation_target_outside", invocation_target_outside);
  write(e, "shutdown", bytes_of(shutdown));
  write(e, "version_1", v2);

  if (g_failures)
    return 1;
  std::printf("seeds written under %s\n", g_root.c_str());
  return 0;
}
