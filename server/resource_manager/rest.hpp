// The operators' REST API (pistache): nodes, leases, accounting, health and
// metrics. docs/resource_manager.md lists the endpoints with examples.
//
// Handlers run on pistache's threads and never touch the registry: GET
// /metrics, GET /nodes and GET /leases of the active leases answer from what
// the Loop publishes (dated by an X-Rfaas-Generated-Ms header), every other
// handler hands a task to the Loop and waits for the answer. Requests that change
// anything (POST, PUT, DELETE) need `Authorization: Bearer <http.token>`; reads
// of nodes, leases and accounting need that token or the read-only one;
// /health and /metrics answer without a token unless configured otherwise.
// Connections are kept alive within bounds (rest_connections.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "resource_manager/loop.hpp"
#include "resource_manager/metrics.hpp"

namespace Pistache::Http {
class Endpoint;
}

namespace rfaas::rm {

struct ConnectionCount;

/// Who may call what (from the configuration's http block).
struct RestAccess {
  /// Changes and reads.
  std::string admin_token;
  /// Reads only; empty: none.
  std::string read_token;
  /// Whether /health and /metrics answer without a token.
  bool open_health = true;
  bool open_metrics = true;
};

/// How the REST server treats connections (the configuration's http block;
/// rest_connections.hpp says how).
struct RestConnectionLimits {
  /// Most open connections; one more is answered 503 and closed.
  uint32_t max_connections = 256;
  /// A connection that sent nothing for this long (between requests, or in
  /// the middle of one) is closed; pistache looks every 0.5 s.
  std::chrono::milliseconds idle_timeout{60'000};
};

class RestServer {
public:
  RestServer(Loop &loop, RestAccess access);
  ~RestServer();
  RestServer(const RestServer &) = delete;
  RestServer &operator=(const RestServer &) = delete;

  /// Binds `host`:`port` (0: any free port) and serves on `threads` threads,
  /// keeping connections alive within `limits`. Throws std::runtime_error
  /// naming the address if it cannot bind.
  void start(const std::string &host, uint16_t port, uint32_t threads,
             const RestConnectionLimits &limits = {});
  /// Connections open now, and refused for being over the limit since start.
  uint32_t open_connections() const;
  uint64_t refused_connections() const;
  /// The bound port (the real one when started with 0).
  uint16_t port() const { return port_; }
  void stop();

  RequestLatencies &latencies() { return latencies_; }

private:
  struct Routes;
  struct QuotaRoutes;
  Loop &loop_;
  RestAccess access_;
  RequestLatencies latencies_;
  std::shared_ptr<Pistache::Http::Endpoint> endpoint_;
  std::shared_ptr<void> router_keepalive_;
  std::shared_ptr<ConnectionCount> connections_;
  uint16_t port_ = 0;
};

/// Constant-time check of an Authorization header value against the token
/// ("Bearer <token>"); false for a missing or malformed header.
bool bearer_matches(const std::string *header, const std::string &token);

} // namespace rfaas::rm
