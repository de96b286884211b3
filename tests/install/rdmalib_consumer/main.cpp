// rdmalib on its own, built against the installed package: one process opens
// a Fabric on the given device, listens, connects to itself from a second
// thread and writes a greeting with write-with-immediate into a buffer the
// accepting side advertised. Follows the capabilities, as docs/rdmalib.md's
// example does, so it runs on every provider.
//
// Usage: rdmalib_consumer DEVICES_JSON DEVICE
#include <rdmalib/config.hpp>
#include <rdmalib/rdmalib.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <future>
#include <string>
#include <thread>

using namespace std::chrono_literals;

namespace {

constexpr char kGreeting[] = "hello over the installed rdmalib";

// Connects to `server` and writes the greeting into the advertised buffer,
// once `ready` (the accepting side posted its receives) and keeps the
// connection and the source buffer until `received` (it saw the greeting).
bool write_greeting(rdmalib::Fabric &fabric, const rdmalib::Address &server,
                    std::shared_future<void> ready, std::shared_future<void> received) {
  rdmalib::Buffer<char> out(fabric, 64);
  std::memcpy(out.data(), kGreeting, sizeof(kGreeting));
  rdmalib::Connection conn = rdmalib::Connection::connect(fabric, server, nullptr, 0, 10s);
  conn.attach(out.region());
  rdmalib::RemoteBuffer target;
  if (conn.peer_private_data().size() != sizeof(target)) {
    std::fprintf(stderr, "FAIL: the accept reply carries %zu bytes, not a RemoteBuffer\n",
                 conn.peer_private_data().size());
    return false;
  }
  std::memcpy(&target, conn.peer_private_data().data(), sizeof(target));
  rdmalib::Operations ops = conn.ops();
  uint32_t len = sizeof(kGreeting) - 1;
  if (ready.wait_for(20s) != std::future_status::ready) {
    std::fprintf(stderr, "FAIL: the accepting side never posted its receives\n");
    return false;
  }
  if (ops.write_imm(out.local_bytes(0, len), target, 0, len, 1) != rdmalib::Status::Ok) {
    std::fprintf(stderr, "FAIL: write_imm: %s\n", ops.last_error());
    return false;
  }
  rdmalib::Completion c;
  rdmalib::WaitResult r = ops.wait(rdmalib::Queue::Send, &c, 1, 10000);
  if (r.status != rdmalib::Status::Ok || c.status != rdmalib::Status::Ok) {
    std::fprintf(stderr, "FAIL: the write did not complete: %s\n", ops.last_error());
    return false;
  }
  received.wait_for(20s);
  return true;
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s DEVICES_JSON DEVICE\n", argv[0]);
    return 2;
  }
  try {
    rdmalib::DeviceDatabase db = rdmalib::DeviceDatabase::load(argv[1]);
    const rdmalib::DeviceConfig &dev = db.find(argv[2]);
    rdmalib::Fabric fabric(dev);
    const rdmalib::Capabilities &caps = fabric.capabilities();
    std::printf("rdmalib_consumer (rdmalib %s): %s\n", RDMALIB_VERSION, fabric.describe().c_str());

    rdmalib::Listener listener(fabric, rdmalib::Address{dev.ip_address, 0});
    rdmalib::Buffer<char> inbox(fabric, 4096);
    size_t slot = std::max<size_t>(caps.notify_message_size, 16);
    rdmalib::Buffer<char> recvs(fabric, 4 * slot);

    // The client writes only once the receives are posted (`ready`), and
    // keeps its connection until the greeting was seen (`received`).
    bool written = false;
    std::promise<void> ready, received;
    std::shared_future<void> ready_future = ready.get_future().share();
    std::shared_future<void> received_future = received.get_future().share();
    std::thread client([&] {
      try {
        written = write_greeting(fabric, listener.address(), ready_future, received_future);
      } catch (const std::exception &e) {
        std::fprintf(stderr, "FAIL: client: %s\n", e.what());
      }
    });

    bool ok = false;
    uint32_t got = 0;
    try {
      rdmalib::RemoteBuffer advert = inbox.remote();
      rdmalib::Connection conn = listener.accept(&advert, sizeof(advert), 10s);
      conn.attach(inbox.region());
      conn.attach(recvs.region());
      rdmalib::Operations ops = conn.ops();
      bool posted = true;
      for (uint64_t i = 0; i < 4 && posted; ++i)
        posted = ops.post_recv(recvs.local(i * slot, slot), i) == rdmalib::Status::Ok;
      if (!posted)
        std::fprintf(stderr, "FAIL: post_recv: %s\n", ops.last_error());
      ready.set_value();
      if (posted) {
        rdmalib::Completion c[4];
        rdmalib::WaitResult r = ops.wait(rdmalib::Queue::Recv, c, 4, 10000);
        ok = r.status == rdmalib::Status::Ok && c[0].kind == rdmalib::OpKind::RemoteWriteImm &&
             c[0].imm == sizeof(kGreeting) - 1 &&
             std::memcmp(inbox.data(), kGreeting, sizeof(kGreeting) - 1) == 0;
        got = c[0].imm;
        if (!ok)
          std::fprintf(stderr, "FAIL: no greeting arrived (%s)\n", rdmalib::to_string(r.status));
      }
    } catch (const std::exception &e) {
      std::fprintf(stderr, "FAIL: server: %s\n", e.what());
    }
    try {
      ready.set_value();
    } catch (const std::future_error &) {
      // Already set on the way through.
    }
    received.set_value();
    client.join();
    if (!ok || !written)
      return 1;
    std::printf("received: %.*s\n", static_cast<int>(got), inbox.data());
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "FAIL: %s\n", e.what());
    return 1;
  }
}
