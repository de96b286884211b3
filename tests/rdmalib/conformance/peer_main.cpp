// Helper process of the conformance suite: a peer in another process.
//
//   rdmalib_conformance_peer --provider P --endpoint msg|rdm|auto --caps MASK
//                            [--ip ADDRESS] [--domain DEVICE]
//                            (--connect ADDRESS | --listen ADDRESS|default) --seed N
//
// --ip is the Fabric's ip_address (default: the --listen host, else 127.0.0.1;
// empty for a device without one), --domain its DeviceConfig::domain (default
// empty). ADDRESS is Address::parse's text; "--listen default" binds where the
// provider puts a device's endpoint, and the peer prints the address it
// listens on ("ADDRESS <text>"). Connects to (or listens
// for) the test, then serves the commands described in peer_protocol.hpp. Exit codes: 0 done (quit,
// or the test closed), 2 setup error, 3 bad private data, 4 idle for 30 s, 5 data-path error, 64
// usage.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include <rdmalib/rdmalib.hpp>

#include "peer_protocol.hpp"

using namespace rdmalib;
using namespace conformance;

namespace {

constexpr int kIdleMs = 30000;
constexpr auto kSetupTimeout = std::chrono::milliseconds(15000);

int usage(const char *why) {
  std::fprintf(
      stderr,
      "peer: %s\nusage: rdmalib_conformance_peer --provider P --endpoint msg|rdm|auto "
      "--caps MASK [--ip ADDRESS] [--domain DEVICE] (--connect ADDRESS | --listen ADDRESS|default) "
      "--seed N\n",
      why);
  return 64;
}

void line(const std::string &text) {
  std::printf("%s%s\n", kPeerLinePrefix, text.c_str());
  std::fflush(stdout);
}

struct Peer {
  Fabric &fabric;
  Connection &conn;
  Buffer<uint8_t> &recvs;
  Buffer<uint8_t> &out;

  void repost(uint64_t slot) {
    Status st = conn.ops().post_recv(recvs.local_bytes(slot * kPeerSlotSize, kPeerSlotSize), slot);
    if (st != Status::Ok) {
      std::fprintf(stderr, "peer: post_recv: %s %s\n", to_string(st), conn.ops().last_error());
      std::exit(5);
    }
  }

  /// Send the first `len` bytes of `out` and wait for the completion.
  void send(size_t len) {
    Operations ops = conn.ops();
    Status st = ops.send(out.local_bytes(0, len), 1);
    if (st != Status::Ok) {
      std::fprintf(stderr, "peer: send: %s %s\n", to_string(st), ops.last_error());
      std::exit(5);
    }
    Completion c;
    WaitResult r = ops.wait(Queue::Send, &c, 1, kIdleMs);
    if (r.count != 1 || c.status != Status::Ok) {
      std::fprintf(stderr, "peer: send completion: %s %s\n",
                   to_string(r.count ? c.status : r.status), ops.last_error());
      std::exit(5);
    }
  }
};

} // namespace

int main(int argc, char **argv) {
  std::map<std::string, std::string> args;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strncmp(argv[i], "--", 2) != 0)
      return usage("options come in pairs");
    args[argv[i] + 2] = argv[i + 1];
  }
  if (argc % 2 == 0)
    return usage("options come in pairs");
  if (!args.count("provider") || !args.count("seed") ||
      (args.count("connect") == args.count("listen")))
    return usage("missing option");
  const uint64_t seed = std::strtoull(args["seed"].c_str(), nullptr, 10);

  try {
    DeviceConfig dev;
    dev.name = "peer";
    dev.provider = args["provider"];
    if (args.count("ip"))
      dev.ip_address = args["ip"];
    else
      dev.ip_address = args.count("listen") && args["listen"] != "default"
                           ? Address::parse(args["listen"]).host
                           : "127.0.0.1";
    dev.domain = args["domain"];
    const std::string &ep = args["endpoint"];
    if (!ep.empty() && !parse_endpoint_preference(ep, dev.endpoint))
      throw Error(ErrorKind::Config,
                  "peer: --endpoint \"" + ep + "\" is not one of " + endpoint_preference_names());
    Fabric fabric(dev, CapabilityMask::parse(args["caps"]));

    Buffer<uint8_t> region(fabric, kPeerRegionSize);
    Buffer<uint8_t> recvs(fabric, kPeerSlots * kPeerSlotSize);
    Buffer<uint8_t> out(fabric, kPeerSlotSize);
    fill_pattern(region.data(), kPeerRegionSize, seed);
    PeerHello hello = make_hello(region.remote(), seed);
    const std::vector<uint8_t> expected = test_private_data(seed);

    Connection conn;
    std::unique_ptr<Listener> listener;
    if (args.count("listen")) {
      listener = std::make_unique<Listener>(
          fabric, args["listen"] == "default" ? Address{} : Address::parse(args["listen"]));
      line("ADDRESS " + listener->address().to_string());
      ConnectionRequest req = listener->next_request(kSetupTimeout);
      if (req.private_data() != expected) {
        std::fprintf(stderr, "peer: the test's private data is corrupted (%zu bytes)\n",
                     req.private_data().size());
        return 3;
      }
      conn = req.accept(&hello, sizeof hello, kSetupTimeout);
    } else {
      conn = Connection::connect(fabric, Address::parse(args["connect"]), &hello, sizeof hello,
                                 kSetupTimeout);
      if (conn.peer_private_data() != expected) {
        std::fprintf(stderr, "peer: the test's private data is corrupted (%zu bytes)\n",
                     conn.peer_private_data().size());
        return 3;
      }
    }
    if (fabric.capabilities().endpoint_bound_memory) {
      conn.attach(region.region());
      conn.attach(recvs.region());
      conn.attach(out.region());
    }

    Peer peer{fabric, conn, recvs, out};
    for (size_t i = 0; i < kPeerSlots; ++i)
      peer.repost(i);
    line("CONNECTED");

    Operations ops = conn.ops();
    for (;;) {
      Completion c;
      WaitResult r = ops.wait(Queue::Recv, &c, 1, kIdleMs);
      if (r.count == 0) {
        if (r.status == Status::Closed)
          return 0;
        std::fprintf(stderr, "peer: wait: %s %s\n", to_string(r.status), ops.last_error());
        return r.status == Status::Timeout ? 4 : 5;
      }
      if (c.kind == OpKind::PeerClosed || c.status == Status::Closed ||
          c.status == Status::Cancelled)
        return 0;
      if (c.status != Status::Ok) {
        std::fprintf(stderr, "peer: completion %s\n", to_string(c.status));
        return 5;
      }
      if (c.kind == OpKind::RemoteWriteImm) {
        if (fabric.capabilities().write_consumes_receive) {
          if (c.context >= kPeerSlots) {
            std::fprintf(stderr, "peer: RemoteWriteImm context %llu is not a receive slot\n",
                         static_cast<unsigned long long>(c.context));
            return 5;
          }
          peer.repost(c.context);
        }
        size_t n = std::min<size_t>(c.imm, kPeerRegionSize);
        out[0] = 'M';
        std::memcpy(out.data() + 1, region.data(), n);
        peer.send(n + 1);
        continue;
      }
      if (c.kind != OpKind::Recv || c.context >= kPeerSlots) {
        std::fprintf(stderr, "peer: unexpected completion kind %d context %llu\n", int(c.kind),
                     static_cast<unsigned long long>(c.context));
        return 5;
      }
      const uint8_t *msg = recvs.data() + c.context * kPeerSlotSize;
      size_t len = c.length;
      char cmd = len ? static_cast<char>(msg[0]) : '?';
      if (cmd == 'E') {
        std::memcpy(out.data(), msg, len);
        peer.repost(c.context);
        peer.send(len);
      } else if (cmd == 'S') {
        peer.repost(c.context);
        for (uint64_t seq = 0;; ++seq) {
          out[0] = 'D';
          std::memcpy(out.data() + 1, &seq, 8);
          fill_pattern(out.data() + 9, kStreamMessageSize - 9, seq);
          peer.send(kStreamMessageSize);
        }
      } else if (cmd == 'Q') {
        conn.close();
        return 0;
      } else {
        std::fprintf(stderr, "peer: unknown command byte 0x%02x (length %zu)\n", msg[0], len);
        return 5;
      }
    }
  } catch (const Error &e) {
    std::fprintf(stderr, "peer: %s\n", e.what());
    return 2;
  }
}
