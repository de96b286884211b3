#include "resource_manager/rest_connections.hpp"

#include <sys/socket.h>

#include <chrono>
#include <cstring>

#include <pistache/peer.h>
#include <spdlog/spdlog.h>

namespace rfaas::rm {

namespace Http = Pistache::Http;
using Pistache::Tcp::Peer;

namespace {

/// The key of a connection's slot among its peer's data.
const char *const kSlot = "rfaas.connection";
/// Marks a connection refused for being over the limit.
const char *const kRefused = "rfaas.refused";

/// Held by a counted connection; pistache frees it with the peer, however
/// the connection ended.
struct Slot {
  std::shared_ptr<ConnectionCount> count;
  ~Slot() { count->open.fetch_sub(1, std::memory_order_relaxed); }
};

/// Ends a connection through pistache's own path: with both directions shut
/// down its next read sees the end, and pistache closes the descriptor and
/// frees the peer (closing it here would race with pistache's use of the
/// number). What is already queued for sending still goes out.
void shut(const std::shared_ptr<Peer> &peer) { ::shutdown(peer->fd(), SHUT_RDWR); }

std::shared_ptr<spdlog::logger> log() {
  auto l = spdlog::get("resource_manager");
  return l ? l : spdlog::default_logger();
}

} // namespace

bool keeps_alive(Http::Version version, const Http::Header::Connection *connection) {
  if (connection && connection->control() == Http::ConnectionControl::Close)
    return false;
  if (version == Http::Version::Http10)
    return connection && connection->control() == Http::ConnectionControl::KeepAlive;
  return true;
}

ConnectionGate::ConnectionGate(std::shared_ptr<Pistache::Rest::Router> router,
                               std::shared_ptr<ConnectionCount> count)
    : router_(std::move(router)), count_(std::move(count)) {}

void ConnectionGate::onConnection(const std::shared_ptr<Peer> &peer) {
  // What Http::Handler::onConnection does (it is private, so not callable
  // from here): the connection's request parser.
  peer->putData(ParserData, std::make_shared<Http::RequestParser>(getMaxRequestSize()));
  const uint32_t before = count_->open.fetch_add(1, std::memory_order_relaxed);
  peer->putData(kSlot, std::shared_ptr<Slot>(new Slot{count_}));
  if (before < count_->max)
    return;
  // Counted before the answer goes out: whoever reads the 503 sees it counted.
  const uint64_t refused = count_->refused.fetch_add(1, std::memory_order_relaxed) + 1;
  // Over the limit: a one-line answer straight into the new socket's empty
  // send buffer (it fits), then the close. The client learns why instead of
  // seeing a reset.
  static const std::string body = "{\"error\":\"too many open connections (http.max_connections); "
                                  "close idle ones or retry later\",\"code\":\"busy\"}\n";
  static const std::string answer = "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n"
                                    "Content-Type: application/json\r\nRetry-After: 1\r\n"
                                    "Content-Length: " +
                                    std::to_string(body.size()) + "\r\n\r\n" + body;
  ssize_t n = ::send(peer->fd(), answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)n; // a client that is already gone needs no answer
  peer->putData(kRefused, std::make_shared<bool>(true));
  shut(peer);
  // Logged at the first refusal and then once per 1,000: a flood must not
  // flood the log too.
  if (refused == 1 || refused % 1000 == 0)
    log()->warn("REST: {} connection(s) refused so far: {} open, the limit is {} "
                "(http.max_connections)",
                refused, before, count_->max);
}

void ConnectionGate::onDisconnection(const std::shared_ptr<Peer> &peer) {
  router_->disconnectPeer(peer);
}

void ConnectionGate::onRequest(const Http::Request &request, Http::ResponseWriter response) {
  // A refused connection's request may still arrive before the close: it
  // was answered (503) already.
  try {
    if (response.peer()->tryGetData(kRefused))
      return;
  } catch (const std::exception &) {
    return; // the peer is gone: nobody to answer
  }
  auto connection = request.headers().tryGet<Http::Header::Connection>();
  const bool keep = keeps_alive(request.version(), connection.get());
  response.headers().remove<Http::Header::Connection>();
  response.headers().add<Http::Header::Connection>(keep ? Http::ConnectionControl::KeepAlive
                                                        : Http::ConnectionControl::Close);
  router_->route(request, std::move(response));
}

void send_response(Http::ResponseWriter &w, Http::Code code, const std::string &body) {
  auto connection = w.headers().tryGet<Http::Header::Connection>();
  const bool close = connection && connection->control() == Http::ConnectionControl::Close;
  std::weak_ptr<Peer> peer;
  if (close) {
    try {
      peer = w.peer();
    } catch (const std::exception &) {
      return; // the client is gone
    }
  }
  auto sent = w.send(code, body);
  if (!close)
    return;
  // Once the answer is out (or could not be): on pistache's thread, which
  // alone frees the peer, so the lock below cannot see a reused descriptor.
  auto end = [peer] {
    if (auto p = peer.lock())
      shut(p);
  };
  sent.then([end](ssize_t) { end(); }, [end](std::exception_ptr &) { end(); });
}

} // namespace rfaas::rm
