// Fuzz target: what an executor does with the bytes it receives, driven
// without a network.
//
// The executor's handlers (Worker in server/executor/worker.cpp, AccountingLink
// in accounting_link.cpp, the zygote in zygote.cpp) are bound to live
// connections and registered buffers, so this target runs the layer they
// consist of, with the executor's own buffer sizes and checks:
//  * the launch spec text it is started with (LaunchSpec::parse, as the zygote
//    and `executor --spec` read it), and the AllocationRequest inside it;
//  * the ConnectReply private data of the client and of the manager;
//  * a control message in a kControlMessageMax buffer: Shutdown or CodeHeader
//    (worker 0), BufferAdvertisement (the accounting record);
//  * an input slot: the invocation's headers decoded from the whole slot
//    (decode_input_slot), whose payload must then lie inside the slot.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/launch_spec.hpp"
#include "fuzz_support.hpp"

namespace {

constexpr size_t kCtl = proto::kControlMessageMax;

void spec_text(const uint8_t *data, size_t size) {
  rfaas::server::LaunchSpec spec;
  try {
    spec =
        rfaas::server::LaunchSpec::parse(std::string(reinterpret_cast<const char *>(data), size));
  } catch (const rfaas::server::SpecError &) {
    return; // a clear error, which the zygote reports to the manager
  }
  // What parse accepts, serialize writes back to the same spec.
  rfaas::server::LaunchSpec again = rfaas::server::LaunchSpec::parse(spec.serialize());
  FUZZ_CHECK(again.allocation_id == spec.allocation_id);
  FUZZ_CHECK(proto::equal(again.secret, spec.secret));
  FUZZ_CHECK(again.cores == spec.cores);
  FUZZ_CHECK(again.memory_mib == spec.memory_mib);
  FUZZ_CHECK(again.device.name == spec.device.name);
  FUZZ_CHECK(again.manager_host == spec.manager_host);
  FUZZ_CHECK(again.manager_port == spec.manager_port);
  FUZZ_CHECK(again.request == spec.request);
  // run_executor: the request must decode, and match the cores.
  proto::AllocationRequest req;
  std::vector<proto::BufferDescriptor> results;
  proto::WireResult r = proto::decode(spec.request.data(), spec.request.size(), req, results);
  if (!r) {
    (void)proto::describe(r);
    return;
  }
  FUZZ_CHECK(results.size() == req.cores);
  for (uint32_t i = 0; i < req.cores; ++i)
    FUZZ_CHECK(results[i].slots >= req.input_slots && results[i].slot_size >= proto::kSlotPrefix);
}

void control_message(const uint8_t *data, size_t size) {
  std::vector<uint8_t> ctl(kCtl, 0);
  if (size > 0)
    std::memcpy(ctl.data(), data, std::min(size, kCtl));
  proto::Header h;
  proto::WireResult r = proto::peek(ctl.data(), kCtl, h);
  if (r && h.type == proto::MessageType::Shutdown)
    return;
  proto::CodeHeader code;
  r = proto::decode(ctl.data(), kCtl, code);
  if (r) {
    FUZZ_CHECK(code.library_size >= 1 && code.library_size <= proto::kMaxLibrarySize);
    FUZZ_CHECK(code.source.size >= code.library_size);
  }
  proto::BufferAdvertisement adv;
  r = proto::decode(ctl.data(), kCtl, adv);
  if (r) {
    // Every slot, at its stride, lies inside the buffer, and slots never overlap.
    const proto::BufferDescriptor &d = adv.descriptor;
    FUZZ_CHECK(d.stride() >= d.slot_size);
    FUZZ_CHECK(d.buffer.size >= d.offset(d.slots - 1) + d.slot_size);
  }
}

void input_slot(const uint8_t *data, size_t size) {
  // The slot is the whole input (its size is the allocation's input_slot_size).
  proto::InvocationHeader h;
  proto::ResultTarget t;
  proto::WireResult r = proto::decode_input_slot(data, size, h, t);
  if (!r) {
    (void)proto::reply_code(r.error);
    return;
  }
  FUZZ_CHECK(proto::kSlotPrefix + uint64_t(h.payload_size) <= size);
  FUZZ_CHECK(h.slot < proto::kMaxSlots);
  // A result target the worker accepts lies inside the region it names and
  // holds at least the result header.
  if (h.flags & proto::kWithTarget) {
    FUZZ_CHECK(t.capacity >= proto::kResultHeaderSize);
    FUZZ_CHECK(t.offset <= t.target.size);
    FUZZ_CHECK(t.offset + t.capacity <= t.target.size);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  spec_text(data, size);
  proto::ConnectReply reply;
  if (proto::decode(data, size, reply))
    FUZZ_CHECK(proto::is_known(reply.status));
  control_message(data, size);
  input_slot(data, size);
  return 0;
}
