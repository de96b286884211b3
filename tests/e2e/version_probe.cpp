// Connects to an executor manager with a ClientHello of another protocol
// version, through rdmalib directly (librfaas always speaks its own version),
// and prints the status of the manager's ConnectReply:
//   "probe: reply <status> version <header version>"
//   rfaas_e2e_version_probe DEVICES DEVICE HOST:PORT VERSION
#include <chrono>
#include <cstdio>
#include <string>

#include <rdmalib/rdmalib.hpp>

#include "protocol/protocol.hpp"

namespace proto = rfaas::protocol;

int main(int argc, char **argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s DEVICES DEVICE HOST:PORT VERSION\n", argv[0]);
    return 2;
  }
  try {
    rdmalib::DeviceDatabase db = rdmalib::DeviceDatabase::load(argv[1]);
    rdmalib::Fabric fabric(db.find(argv[2]));
    proto::ClientHello hello;
    uint8_t bytes[sizeof hello];
    proto::encode(hello, bytes, sizeof bytes);
    const unsigned version = static_cast<unsigned>(std::stoul(argv[4]));
    bytes[4] = static_cast<uint8_t>(version & 0xFF); // Header.version, little-endian
    bytes[5] = static_cast<uint8_t>(version >> 8);
    rdmalib::Connection conn = rdmalib::Connection::connect(
        fabric, rdmalib::Address::parse(argv[3]), bytes, sizeof bytes, std::chrono::seconds(10));
    proto::ConnectReply reply;
    const auto &pd = conn.peer_private_data();
    proto::WireResult r = proto::decode(pd.data(), pd.size(), reply);
    if (!r) {
      std::printf("probe: undecodable %s\n", proto::describe(r).c_str());
      return 1;
    }
    std::printf("probe: reply %s version %u\n", proto::to_string(reply.status),
                static_cast<unsigned>(reply.header.version));
    conn.close();
  } catch (const std::exception &e) {
    std::printf("probe: error %s\n", e.what());
    return 1;
  }
  return 0;
}
