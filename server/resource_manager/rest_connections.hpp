// The REST server's connections: which are kept alive, how many may be
// open, and closing the ones that asked for it. docs/resource_manager.md
// ("REST connections") describes the behaviour for operators.
//
// Pistache 0.0.5 (Debian 12) gets keep-alive wrong in both directions: it
// answers "Connection: Close" to every HTTP/1.1 request without a Connection
// header (so curl and every library close after one request), yet never
// closes the connection itself, whatever the header says; and it accepts any
// number of connections. ConnectionGate sits between pistache and the router
// and fixes that: HTTP/1.1 requests keep their connection unless they say
// "close", HTTP/1.0 ones only with "keep-alive"; a connection over the limit
// gets a 503 and is closed at once; an answer that says "close" is followed by
// the close (send_response). Pistache's own idle timer closes a connection
// that sent nothing for the idle timeout.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include <pistache/http.h>
#include <pistache/router.h>

namespace rfaas::rm {

/// Open connections, shared by the gate's copies (one per pistache thread).
struct ConnectionCount {
  explicit ConnectionCount(uint32_t max) : max(max) {}
  const uint32_t max;
  std::atomic<uint32_t> open{0};
  /// Connections refused for being over `max` since start.
  std::atomic<uint64_t> refused{0};
};

/// Whether a request's connection stays open after its answer: HTTP/1.1
/// unless the Connection header lists "close", HTTP/1.0 only when it lists
/// "keep-alive". `connection`: the request's header, null when absent.
bool keeps_alive(Pistache::Http::Version version,
                 const Pistache::Http::Header::Connection *connection);

class ConnectionGate : public Pistache::Http::Handler {
public:
  HTTP_PROTOTYPE(ConnectionGate)

  ConnectionGate(std::shared_ptr<Pistache::Rest::Router> router,
                 std::shared_ptr<ConnectionCount> count);

  /// Counts the connection (it is uncounted when pistache frees it, which
  /// covers its idle timer too, which skips onDisconnection); over the
  /// limit: a 503 and the connection closed.
  void onConnection(const std::shared_ptr<Pistache::Tcp::Peer> &peer) override;
  void onDisconnection(const std::shared_ptr<Pistache::Tcp::Peer> &peer) override;
  /// Sets the answer's Connection header (keeps_alive), then routes.
  void onRequest(const Pistache::Http::Request &request,
                 Pistache::Http::ResponseWriter response) override;

private:
  std::shared_ptr<Pistache::Rest::Router> router_;
  std::shared_ptr<ConnectionCount> count_;
};

/// Sends an answer; when its Connection header says "close" (set by the
/// gate from the request), closes the connection once the answer is out.
/// Every answer of the REST handlers goes through here.
void send_response(Pistache::Http::ResponseWriter &w, Pistache::Http::Code code,
                   const std::string &body);

} // namespace rfaas::rm
