// A hostile peer against a shared endpoint (tcp;ofi_rxm): links over one
// endpoint are told apart by the tag of each message, which the sender
// chooses. A process that reaches the endpoint with plain libfabric sends
// messages tagged for every link id; none may reach a link whose peer it is
// not, and the link's own peer must still get through.
//
// The hostile side is raw libfabric on purpose (a real attacker does not use
// rdmalib); the server and its legitimate client use only rdmalib's API.
// Exit 0: nothing foreign arrived; 1: it did (or the legitimate message did
// not); 77: skipped, with the reason on stderr.
#include <rdmalib/rdmalib.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

using namespace std::chrono_literals;

constexpr const char *kSpoof = "SPOOFED-MESSAGE!";
constexpr size_t kSpoofLen = 16;
// rdmalib's receive pool matches tags with the top bit set, the link id in
// the low 32 bits (rdmalib/libfabric/backend.hpp, kPoolTag): what an
// attacker reads from the source and puts on the wire.
constexpr uint64_t kPoolBit = 1ULL << 63;

int fail(const std::string &why) {
  std::fprintf(stderr, "shared_endpoint_spoof: FAIL: %s\n", why.c_str());
  return 1;
}

int skip(const std::string &why) {
  std::fprintf(stderr, "shared_endpoint_spoof: skipped: %s\n", why.c_str());
  return 77;
}

/// The attacker: a raw tcp;ofi_rxm endpoint that sends one tagged message
/// per link id to `host:port`. Returns how many sends completed.
int spoof(const std::string &host, uint16_t port, uint32_t max_link) {
  fi_info *hints = fi_allocinfo();
  hints->fabric_attr->prov_name = strdup("tcp;ofi_rxm");
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_TAGGED | FI_MSG | FI_SEND | FI_RECV;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  // No local registration: the attacker sends from plain memory.
  hints->domain_attr->mr_mode = 0;
  fi_info *info = nullptr;
  int done = 0;
  if (fi_getinfo(FI_VERSION(1, 9), "127.0.0.1", nullptr, FI_SOURCE, hints, &info) != 0) {
    fi_freeinfo(hints);
    return -1;
  }
  fid_fabric *fab = nullptr;
  fid_domain *dom = nullptr;
  fid_av *av = nullptr;
  fid_cq *cq = nullptr;
  fid_ep *ep = nullptr;
  fi_av_attr aa{};
  aa.type = FI_AV_TABLE;
  fi_cq_attr ca{};
  ca.format = FI_CQ_FORMAT_TAGGED;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  inet_pton(AF_INET, host.c_str(), &to.sin_addr);
  fi_addr_t dest = FI_ADDR_UNSPEC;
  if (fi_fabric(info->fabric_attr, &fab, nullptr) || fi_domain(fab, info, &dom, nullptr) ||
      fi_av_open(dom, &aa, &av, nullptr) || fi_cq_open(dom, &ca, &cq, nullptr) ||
      fi_endpoint(dom, info, &ep, nullptr) || fi_ep_bind(ep, &av->fid, 0) ||
      fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV) || fi_enable(ep) ||
      fi_av_insert(av, &to, 1, &dest, 0, nullptr) != 1) {
    std::fprintf(stderr, "shared_endpoint_spoof: setting up the raw endpoint failed\n");
    done = -1;
  } else {
    char buf[kSpoofLen];
    std::memcpy(buf, kSpoof, kSpoofLen);
    fi_context2 ctx[64];
    for (uint32_t link = 0; link <= max_link && link < 64; ++link) {
      const auto until = std::chrono::steady_clock::now() + 2s;
      ssize_t r;
      while ((r = fi_tsend(ep, buf, kSpoofLen, nullptr, dest, kPoolBit | link, &ctx[link])) ==
                 -FI_EAGAIN &&
             std::chrono::steady_clock::now() < until) {
        fi_cq_tagged_entry e;
        fi_cq_read(cq, &e, 1);
      }
      if (r != 0) {
        std::fprintf(stderr, "shared_endpoint_spoof: fi_tsend to link %u: %s\n", link,
                     fi_strerror(static_cast<int>(-r)));
        break;
      }
      const auto deadline = std::chrono::steady_clock::now() + 2s;
      for (;;) {
        fi_cq_tagged_entry e;
        ssize_t n = fi_cq_read(cq, &e, 1);
        if (n == 1) {
          ++done;
          break;
        }
        if (n == -FI_EAVAIL) {
          fi_cq_err_entry ee{};
          fi_cq_readerr(cq, &ee, 0);
          std::fprintf(stderr, "shared_endpoint_spoof: the send to link %u failed: %s\n", link,
                       fi_strerror(ee.err));
          break;
        }
        if (std::chrono::steady_clock::now() > deadline)
          break;
      }
    }
  }
  if (ep)
    fi_close(&ep->fid);
  if (cq)
    fi_close(&cq->fid);
  if (av)
    fi_close(&av->fid);
  if (dom)
    fi_close(&dom->fid);
  if (fab)
    fi_close(&fab->fid);
  fi_freeinfo(info);
  fi_freeinfo(hints);
  return done;
}

} // namespace

int main() {
  rdmalib::DeviceConfig d;
  d.name = "spoof";
  d.provider = "tcp;ofi_rxm";
  d.ip_address = "127.0.0.1";
  if (!rdmalib::parse_endpoint_preference("rdm", d.endpoint))
    return fail("rdmalib does not know the endpoint preference \"rdm\"");
  try {
    rdmalib::Fabric server(d);
    rdmalib::Fabric client(d);
    if (!server.capabilities().shared_endpoint)
      return skip("this libfabric gives tcp;ofi_rxm no shared endpoint (each link has its own)");
    rdmalib::Listener listener(server, rdmalib::Address{"127.0.0.1", 0});
    const rdmalib::Address at = listener.address();
    rdmalib::Connection cconn;
    std::string connect_error;
    std::thread t([&] {
      try {
        cconn = rdmalib::Connection::connect(client, at, nullptr, 0, 5000ms);
      } catch (const std::exception &e) {
        connect_error = e.what();
      }
    });
    rdmalib::Connection sconn;
    try {
      auto req = listener.next_request(5000ms);
      sconn = req.accept(nullptr, 0, 5000ms);
    } catch (...) {
      t.join();
      throw;
    }
    t.join();
    if (!connect_error.empty())
      return fail("the legitimate client could not connect: " + connect_error);

    rdmalib::Buffer<char> in(server, 8 * 64);
    rdmalib::Buffer<char> out(client, 64);
    sconn.attach(in.region());
    cconn.attach(out.region());
    rdmalib::Operations sops = sconn.ops();
    rdmalib::Operations cops = cconn.ops();
    for (uint64_t i = 0; i < 8; ++i)
      if (sops.post_recv(in.local_bytes(i * 64, 64), i) != rdmalib::Status::Ok)
        return fail(std::string("post_recv: ") + sops.last_error());

    // The attacker aims at the address the legitimate client sends to. It
    // runs beside this thread, which keeps the server progressing (manual
    // progress: the connection to the attacker forms only while it polls).
    // Whatever the server receives meanwhile must not be the attacker's;
    // then the client's own message must arrive intact.
    const rdmalib::Address target = cconn.remote_address();
    std::atomic<int> sent{-2};
    std::thread attacker([&] { sent = spoof(target.host_text(), target.port, 32); });
    std::memcpy(out.data(), "LEGITIMATE-HELLO", 16);
    bool legit = false, client_sent = false;
    const auto until = std::chrono::steady_clock::now() + 20s;
    std::string failure;
    while (!legit && failure.empty() && std::chrono::steady_clock::now() < until) {
      if (!client_sent && sent.load() != -2) {
        if (cops.send(out.local_bytes(0, 16), 1) != rdmalib::Status::Ok) {
          failure = std::string("the client's send: ") + cops.last_error();
          break;
        }
        client_sent = true;
      }
      rdmalib::Completion c[8];
      cops.poll(rdmalib::Queue::Send, c, 8);
      size_t n = sops.poll(rdmalib::Queue::Recv, c, 8);
      for (size_t i = 0; i < n; ++i) {
        if (c[i].status != rdmalib::Status::Ok) {
          failure = std::string("a receive of the server's link failed: ") +
                    rdmalib::to_string(c[i].status);
          break;
        }
        const char *got = in.data() + c[i].context * 64;
        if (c[i].length == kSpoofLen && std::memcmp(got, kSpoof, kSpoofLen) == 0)
          failure = "a message of a process that is not the link's peer reached the link";
        else if (c[i].length == 16 && std::memcmp(got, "LEGITIMATE-HELLO", 16) == 0)
          legit = true;
      }
    }
    attacker.join();
    if (!failure.empty())
      return fail(failure);
    if (sent <= 0)
      return skip("the raw tcp;ofi_rxm sender could not reach " + target.to_string() + " (sent " +
                  std::to_string(sent.load()) + ")");
    if (!legit)
      return fail("the link's own peer's message did not arrive within 20 s");
    std::printf("shared_endpoint_spoof: %d foreign messages tagged for links 0..32 were sent to "
                "%s; none reached the link, whose own peer's message did\n",
                sent.load(), target.to_string().c_str());
    return 0;
  } catch (const std::exception &e) {
    return fail(e.what());
  }
}
