// rfaas::executor: construction, allocation (docs/protocol.md steps 1-4:
// manager connection, AllocationRequest, workers' connections, code upload)
// and deallocation (step 6).
#include "executor_impl.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

namespace rfaas {

using namespace detail;

rdmalib::Fabric executor::impl::open_fabric(const device &dev) {
  try {
    return rdmalib::Fabric(dev);
  } catch (const rdmalib::Error &e) {
    throw Error(phase::configuration, "", from_rdmalib(e),
                "cannot open device \"" + dev.name + "\": " + e.what());
  }
}

rdmalib::Listener executor::impl::open_listener(rdmalib::Fabric &f, const device &dev) {
  try {
    return rdmalib::Listener(f, rdmalib::Address{dev.ip_address, dev.port});
  } catch (const rdmalib::Error &e) {
    throw Error(phase::configuration, "", from_rdmalib(e),
                "cannot listen for workers on " + dev.ip_address + ":" + std::to_string(dev.port) +
                    ": " + e.what());
  }
}

rdmalib::ConnectionOptions executor::impl::manager_link_options() {
  rdmalib::ConnectionOptions o;
  o.recv_depth = kManagerRecvs;
  o.send_depth = 4;
  return o;
}

rdmalib::ConnectionOptions executor::impl::worker_link_options() const {
  return worker_link_options(nslots);
}

rdmalib::ConnectionOptions executor::impl::worker_link_options(uint32_t slots) {
  // One receive per input slot plus the control messages (nrecv).
  rdmalib::ConnectionOptions o;
  o.send_depth = slots + kExtraRecvs;
  o.recv_depth = slots + kExtraRecvs;
  return o;
}

void executor::impl::fail_worker(phase ph, uint32_t index, proto::ChannelStatus s,
                                 const proto::WireResult &wire, const Worker &w) {
  std::string who = "worker " + std::to_string(index);
  switch (s) {
  case proto::ChannelStatus::Timeout:
    fail(ph, status::timeout, who + " sent nothing in time");
  case proto::ChannelStatus::Closed:
  case proto::ChannelStatus::Shutdown:
    fail(ph, status::closed, who + " closed its connection");
  case proto::ChannelStatus::SendFailed:
    fail(ph, status::network_error, who + ": " + w.control.last_error());
  default:
    fail(ph, from_channel(s, wire), who + ": " + proto::describe(wire));
  }
}

void executor::impl::fail_unless_refused(proto::ChannelStatus st, status fallback,
                                         const std::string &what) {
  proto::AllocationResponse refusal;
  if (st != proto::ChannelStatus::Timeout &&
      manager_channel.await(refusal, Clock::now() + deadlines.connect) ==
          proto::ChannelStatus::Ok &&
      refusal.status != proto::ErrorCode::Ok)
    fail(phase::allocation, from_wire(refusal.status),
         std::string(proto::get_text(refusal.message)));
  fail(phase::allocation, fallback, what);
}

void executor::impl::allocate(const server &m, const allocation_options &o) {
  if (allocated)
    throw Error(phase::usage, m.endpoint(), status::invalid_argument,
                "this executor already holds an allocation; deallocate() first");
  manager_name = m.endpoint();
  const Clock::time_point t0 = Clock::now();
  cold = cold_start{};

  if (o.cores == 0 || o.cores > proto::kMaxWorkers)
    fail(phase::configuration, status::invalid_argument, "cores must be 1..256");
  if (o.slots == 0 || o.slots > proto::kMaxSlots)
    fail(phase::configuration, status::invalid_argument, "slots must be 1..256");
  if (o.max_input_size > proto::kMaxSlotSize - 64 || o.max_output_size > proto::kMaxSlotSize - 64)
    fail(phase::configuration, status::invalid_argument, "max input/output size exceeds 1 GiB");

  // The library, registered for the worker's RDMA read.
  std::ifstream f(o.library, std::ios::binary);
  if (!f)
    fail(phase::configuration, status::invalid_argument,
         "cannot read the function library \"" + o.library + "\"");
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.empty() || bytes.size() > proto::kMaxLibrarySize)
    fail(phase::configuration, status::invalid_argument,
         "the function library \"" + o.library + "\" is empty or larger than 1 GiB");
  rdmalib::Buffer<char> library(fabric, bytes.size(), rdmalib::AccessRemoteRead);
  std::memcpy(library.data(), bytes.data(), bytes.size());
  const uint64_t checksum = proto::library_checksum(bytes.data(), bytes.size());
  std::string libname = o.library.substr(o.library.find_last_of('/') + 1);
  if (libname.size() >= proto::kNameCapacity)
    libname.resize(proto::kNameCapacity - 1);

  nworkers = o.cores;
  nslots = o.slots;
  rr_worker = rr_slot = 0;
  max_input = o.max_input_size;
  max_output = o.max_output_size;
  input_slot = static_cast<uint32_t>(proto::kSlotPrefix + round8(max_input));
  result_slot = static_cast<uint32_t>(proto::kSlotPrefix + round8(max_output));
  nrecv = nslots + kExtraRecvs;
  // The workers connect back once the manager answered; where opening an
  // endpoint is slow (shm), one for their links opens meanwhile.
  fabric.prepare(worker_link_options());

  // Clean up whatever exists if any step below throws.
  struct Guard {
    impl *self;
    bool armed = true;
    ~Guard() {
      if (armed)
        self->teardown(false);
    }
  } guard{this};

  workers.clear();
  workers.resize(nworkers);
  std::vector<proto::BufferDescriptor> descriptors(nworkers);
  try {
    for (uint32_t i = 0; i < nworkers; ++i) {
      Worker &w = workers[i];
      w.results = rdmalib::Buffer<char>(fabric, size_t(nslots) * result_slot,
                                        rdmalib::AccessRemoteWrite | rdmalib::AccessRemoteRead);
      w.staging = rdmalib::Buffer<char>(fabric, size_t(nslots) * input_slot, rdmalib::AccessLocal);
      w.slots.assign(nslots, Slot{});
      descriptors[i].buffer = w.results.remote();
      descriptors[i].worker = i;
      descriptors[i].slots = nslots;
      descriptors[i].slot_size = result_slot;
    }
  } catch (const rdmalib::Error &e) {
    fail(phase::configuration, status::network_error,
         std::string("cannot register client buffers: ") + e.what());
  }

  // 1. Connect to the manager with our lease.
  proto::ClientHello hello;
  hello.lease_id = o.lease_id;
  std::memcpy(hello.token.bytes, o.token.data(), proto::kTokenSize);
  uint8_t hello_bytes[sizeof(proto::ClientHello)];
  proto::encode(hello, hello_bytes, sizeof hello_bytes);
  rdmalib::ConnectionOptions mopts = manager_link_options();
  // A refusal can be transient (see ConnectionOptions::refused_retries); a
  // manager that is really absent still fails within ~150 ms.
  mopts.refused_retries = 3;
  try {
    manager =
        rdmalib::Connection::connect(fabric, rdmalib::Address::from_host_text(m.address, m.port),
                                     hello_bytes, sizeof hello_bytes, deadlines.connect, mopts);
  } catch (const rdmalib::Error &e) {
    fail(phase::connect, from_rdmalib(e), e.what());
  }
  {
    proto::ConnectReply reply;
    const std::vector<uint8_t> &pd = manager.peer_private_data();
    proto::WireResult r = proto::decode(pd.data(), pd.size(), reply);
    if (!r)
      fail(phase::connect, from_wire(proto::reply_code(r.error)),
           "unreadable ConnectReply: " + proto::describe(r));
    if (reply.status != proto::ErrorCode::Ok)
      fail(phase::connect, from_wire(reply.status), "the executor manager refused the client");
  }
  cold.connected = Clock::now() - t0;
  rfaas::logger().debug(
      "allocate: connected to the executor manager after {} ms",
      std::chrono::duration_cast<std::chrono::milliseconds>(cold.connected).count());

  // 2. AllocationRequest + our result descriptors; AllocationResponse.
  const size_t req_size = proto::allocation_request_size(nworkers);
  try {
    proto::ControlOptions copts;
    copts.receives = kManagerRecvs;
    copts.send_size = std::max(req_size, kCtl);
    copts.send_context = kControlCtx;
    manager_channel = proto::ControlChannel(fabric, manager, copts);
  } catch (const std::exception &e) {
    fail(phase::allocation, status::network_error, e.what());
  }
  if (o.lease_cores != 0) {
    // A node that works with a resource manager checks the lease first.
    proto::LeaseProof proof;
    proof.lease_id = o.lease_id;
    proof.expiry_ms = o.lease_expiry_ms;
    proof.memory_mib = o.lease_memory_mib;
    proof.cores = o.lease_cores;
    proof.owner_uid = o.lease_owner_uid;
    std::memcpy(proof.token.bytes, o.token.data(), proto::kTokenSize);
    if (!proto::set_text(proof.client, o.lease_client))
      fail(phase::allocation, status::invalid_argument, "the lease's client name is too long");
    proto::ChannelStatus ps = manager_channel.send(proof, Clock::now() + deadlines.connect);
    if (ps != proto::ChannelStatus::Ok)
      fail_unless_refused(ps, status::network_error,
                          std::string("cannot present the lease (LeaseProof): ") +
                              proto::to_string(ps));
  }
  proto::AllocationRequest req;
  req.cores = nworkers;
  req.memory_mib = o.memory_mib;
  req.hot_timeout_ms = o.hot_timeout_ms;
  req.input_slots = nslots;
  req.input_slot_size = input_slot;
  // An opaque listener name travels whole in client_host, with port 0.
  req.client_port = listener.address().port;
  req.image = o.image;
  req.library_size = bytes.size();
  req.library_checksum = checksum;
  if (!proto::set_text(req.client_host, listener.address().host_text()))
    fail(phase::allocation, status::invalid_argument, "client host name too long");
  proto::WireResult wr = proto::encode(req, descriptors, manager_channel.send_area(),
                                       manager_channel.options().send_size);
  if (!wr)
    fail(phase::allocation, status::invalid_argument,
         "cannot encode the AllocationRequest: " + proto::describe(wr));
  proto::AllocationResponse resp;
  proto::WireResult rw;
  switch (proto::ChannelStatus cs = manager_channel.send_encoded_and_await(
              wr.size, resp, in(deadlines.allocation), &rw)) {
  case proto::ChannelStatus::Ok:
    break;
  case proto::ChannelStatus::Timeout:
    fail(phase::allocation, status::timeout, "no AllocationResponse in time");
  case proto::ChannelStatus::Closed:
  case proto::ChannelStatus::Shutdown:
    // A LeaseProof refused after its send completed closes the connection
    // under the AllocationRequest (seen on soft-RoCE).
    fail_unless_refused(cs, status::closed,
                        "the executor manager closed the connection before answering");
  case proto::ChannelStatus::SendFailed:
    fail_unless_refused(cs, status::network_error,
                        std::string("the AllocationRequest could not be sent: ") +
                            manager_channel.last_error());
  default:
    fail(phase::allocation, from_channel(cs, rw),
         "unreadable AllocationResponse: " + proto::describe(rw));
  }
  if (resp.status != proto::ErrorCode::Ok)
    fail(phase::allocation, from_wire(resp.status), std::string(proto::get_text(resp.message)));
  if (resp.workers != nworkers)
    fail(phase::allocation, status::bad_request,
         "the manager granted " + std::to_string(resp.workers) + " workers, not " +
             std::to_string(nworkers));
  allocation_id = resp.allocation_id;
  cold.allocated = Clock::now() - t0;
  rfaas::logger().debug(
      "allocate: allocation granted after {} ms",
      std::chrono::duration_cast<std::chrono::milliseconds>(cold.allocated).count());

  // 3. Workers connect back and advertise their input slots.
  accept_workers(Clock::now() + deadlines.workers);
  cold.workers_connected = Clock::now() - t0;
  rfaas::logger().debug(
      "allocate: {} worker(s) connected after {} ms", workers.size(),
      std::chrono::duration_cast<std::chrono::milliseconds>(cold.workers_connected).count());

  // 4. Code: worker 0 reads the library from `library`; everyone says Ready.
  Worker &w0 = workers[0];
  try {
    w0.conn.attach(library.region());
  } catch (const rdmalib::Error &e) {
    fail(phase::code, status::network_error, e.what());
  }
  proto::CodeHeader code;
  code.library_size = bytes.size();
  code.checksum = checksum;
  code.source = library.remote();
  proto::set_text(code.name, libname);
  proto::ChannelStatus cs = w0.control.send(code, in(deadlines.ready));
  if (cs != proto::ChannelStatus::Ok)
    fail(phase::code, from_channel(cs, {}), "the CodeHeader could not be sent to worker 0");
  cold.code_shipped = Clock::now() - t0;
  rfaas::logger().debug(
      "allocate: library {} ({} bytes) offered after {} ms", libname, bytes.size(),
      std::chrono::duration_cast<std::chrono::milliseconds>(cold.code_shipped).count());
  collect_ready(Clock::now() + deadlines.ready);
  cold.ready = Clock::now() - t0;
  rfaas::logger().debug("allocate: ready after {} ms",
                        std::chrono::duration_cast<std::chrono::milliseconds>(cold.ready).count());

  for (Worker &w : workers)
    w.alive = true;
  allocated = true;
  guard.armed = false;
}

void executor::impl::accept_workers(Clock::time_point deadline) {
  uint32_t connected = 0;
  const rdmalib::ConnectionOptions opts = worker_link_options();
  while (connected < nworkers) {
    int left = ms_left(deadline);
    rdmalib::ConnectionRequest request;
    try {
      if (left == 0)
        throw rdmalib::Error(rdmalib::ErrorKind::Timeout, "deadline");
      // Wait in short slices: between them the manager may have said that
      // the allocation ended (its executor died), so that this call fails at
      // once instead of at the deadline.
      check_allocation_ended(connected);
      request = listener.next_request(milliseconds(std::min(left, kEndedPollMs)));
    } catch (const rdmalib::Error &e) {
      if (e.kind() == rdmalib::ErrorKind::Timeout) {
        if (ms_left(deadline) > 0)
          continue;
        fail(phase::workers, status::timeout,
             std::to_string(connected) + " of " + std::to_string(nworkers) +
                 " workers connected in time (deadline " +
                 std::to_string(deadlines.workers.count()) + " ms)");
      }
      fail(phase::workers, from_rdmalib(e),
           std::to_string(connected) + " of " + std::to_string(nworkers) +
               " workers connected in time (" + e.what() + ")");
    }
    proto::WorkerHello hello;
    const std::vector<uint8_t> &pd = request.private_data();
    proto::WireResult r = proto::decode(pd.data(), pd.size(), hello);
    proto::ConnectReply reply;
    if (!r)
      reply.status = proto::reply_code(r.error);
    else if (hello.allocation_id != allocation_id || hello.workers != nworkers ||
             workers[hello.worker].conn.is_open())
      reply.status = proto::ErrorCode::LeaseInvalid; // a stranger or a duplicate
    uint8_t reply_bytes[sizeof(proto::ConnectReply)];
    proto::encode(reply, reply_bytes, sizeof reply_bytes);
    if (reply.status != proto::ErrorCode::Ok) {
      // Accept to deliver the status (a bare reject says nothing), then close.
      try {
        request.accept(reply_bytes, sizeof reply_bytes, milliseconds(std::max(left, 1))).close();
      } catch (const rdmalib::Error &) {
      }
      rfaas::logger().warn("refused a worker connection: {}", proto::to_string(reply.status));
      continue;
    }
    Worker &w = workers[hello.worker];
    try {
      w.conn =
          request.accept(reply_bytes, sizeof reply_bytes, milliseconds(std::max(left, 1)), opts);
      w.conn.attach(w.results.region());
      w.conn.attach(w.staging.region());
      proto::ControlOptions copts;
      copts.receives = nrecv;
      copts.send_context = kControlCtx;
      w.control = proto::ControlChannel(fabric, w.conn, copts);
      // Slot traffic seen while a control message is awaited (results and
      // write completions at deallocation) is accounted, not lost.
      w.control.on_data([this, &w](const rdmalib::Completion &c) { on_slot_completion(w, c); });
    } catch (const rdmalib::Error &e) {
      fail(phase::workers, from_rdmalib(e),
           "accepting worker " + std::to_string(hello.worker) + ": " + e.what());
    } catch (const std::exception &e) { // the channel's receives could not be posted
      fail(phase::workers, status::network_error,
           "accepting worker " + std::to_string(hello.worker) + ": " + e.what());
    }
    w.ops = w.conn.ops();
    w.post_deadline = w.ops.post_deadline();
    ++connected;
  }
  // Every worker sends its BufferAdvertisement right after connecting.
  for (uint32_t i = 0; i < nworkers; ++i) {
    Worker &w = workers[i];
    proto::BufferAdvertisement adv;
    proto::WireResult r;
    if (proto::ChannelStatus cs = w.control.await(adv, deadline, &r);
        cs != proto::ChannelStatus::Ok)
      fail_worker(phase::workers, i, cs, r, w);
    if (adv.descriptor.slots < nslots || adv.descriptor.slot_size < input_slot)
      fail(phase::workers, status::bad_request,
           "worker " + std::to_string(i) + " advertised fewer or smaller input slots than asked");
    w.input = adv.descriptor;
    w.advertised = true;
  }
}

void executor::impl::check_allocation_ended(uint32_t connected) {
  proto::ControlMessage m = manager_channel.poll();
  if (m.status != proto::ChannelStatus::Ok)
    return; // nothing (or a broken link: the workers' deadline still bounds the wait)
  proto::AllocationResponse notice;
  if (!proto::decode(m.data, m.size, notice) || notice.allocation_id != allocation_id ||
      notice.status == proto::ErrorCode::Ok)
    return;
  char id_text[17];
  std::snprintf(id_text, sizeof id_text, "%llx", static_cast<unsigned long long>(allocation_id));
  fail(phase::workers, from_wire(notice.status),
       std::string("allocation ") + id_text + " ended before its workers connected (" +
           std::to_string(connected) + " of " + std::to_string(nworkers) +
           "): " + std::string(proto::get_text(notice.message)));
}

void executor::impl::collect_ready(Clock::time_point deadline) {
  // Worker 0 reads the library from us: on manual-progress fabrics that read
  // only moves while we poll its connection, so wait on worker 0 first.
  for (uint32_t i = 0; i < nworkers; ++i) {
    Worker &w = workers[i];
    proto::Ready ready;
    proto::WireResult r;
    if (proto::ChannelStatus cs = w.control.await(ready, deadline, &r);
        cs != proto::ChannelStatus::Ok)
      fail_worker(phase::code, i, cs, r, w);
    if (ready.status != proto::ErrorCode::Ok)
      fail(phase::code, from_wire(ready.status),
           "worker " + std::to_string(i) + ": " + std::string(proto::get_text(ready.message)));
    w.ready = true;
  }
}

void executor::impl::teardown(bool polite) noexcept {
  proto::Shutdown bye;
  bye.allocation_id = allocation_id;
  bye.reason = proto::ErrorCode::Ok;
  // The workers' goodbyes share one deadline (which bounds their posts too,
  // ControlChannel::send): to a node that died, a reliable-datagram provider
  // may refuse posts while it tries to reconnect, and deallocating a dead
  // allocation of many workers must not take the shutdown deadline many
  // times over.
  const Clock::time_point workers_until = in(deadlines.shutdown);
  for (size_t i = 0; i < workers.size(); ++i) {
    Worker &w = workers[i];
    if (polite && w.alive && w.conn.is_open()) {
      proto::ChannelStatus cs = w.control.send(bye, workers_until);
      if (cs != proto::ChannelStatus::Ok)
        rfaas::logger().warn("deallocate: Shutdown to worker {} of {}: {}", i, manager_name,
                             proto::to_string(cs));
    }
    for (Slot &s : w.slots)
      if (s.state == SlotState::InFlight) {
        if (s.source)
          --s.source->in_flight;
        if (s.target)
          --s.target->in_flight;
      }
    w.conn.close();
  }
  if (polite && manager.is_open()) {
    proto::ChannelStatus cs = manager_channel.send(bye, in(deadlines.shutdown));
    if (cs != proto::ChannelStatus::Ok)
      rfaas::logger().warn("deallocate: Shutdown to the manager {}: {}", manager_name,
                           proto::to_string(cs));
  }
  manager.close();
  workers.clear();
  manager = rdmalib::Connection();
  manager_channel = proto::ControlChannel();
  allocated = false;
  nworkers = 0;
  ++generation;
}

// ---- executor -----------------------------------------------------------------------

executor::executor(const device &dev, const timeouts &deadlines)
    : impl_(std::make_shared<impl>(dev, deadlines)) {}

executor::~executor() { deallocate(); }
executor::executor(executor &&) noexcept = default;
executor &executor::operator=(executor &&o) noexcept {
  if (this != &o) {
    deallocate();
    impl_ = std::move(o.impl_);
  }
  return *this;
}

void executor::allocate(const server &manager, const allocation_options &options) {
  impl_->allocate(manager, options);
}

void executor::allocate(const server &manager, uint32_t cores, uint32_t memory_mib,
                        const std::string &library, int32_t hot_timeout_ms) {
  allocation_options o;
  o.cores = cores;
  o.memory_mib = memory_mib;
  o.library = library;
  o.hot_timeout_ms = hot_timeout_ms;
  allocate(manager, o);
}

void executor::deallocate() noexcept {
  if (impl_ && impl_->allocated)
    impl_->teardown(true);
}

bool executor::allocated() const noexcept { return impl_ && impl_->allocated; }
uint32_t executor::workers() const noexcept { return impl_ ? impl_->nworkers : 0; }
uint32_t executor::slots() const noexcept { return impl_ ? impl_->nslots : 0; }
uint64_t executor::allocation_id() const noexcept { return impl_ ? impl_->allocation_id : 0; }
uint32_t executor::max_input_size() const noexcept { return impl_ ? impl_->max_input : 0; }
uint32_t executor::max_output_size() const noexcept { return impl_ ? impl_->max_output : 0; }
const cold_start &executor::cold_start_times() const noexcept { return impl_->cold; }
std::string executor::describe_network() const { return impl_->fabric.describe(); }

} // namespace rfaas
