// Who a lease request comes from: the resource manager's check of the MUNGE
// credential a client attaches to its LeaseRequest (auth "munge"), or none
// at all (auth "none": every client is anonymous).
//
// MUNGE is the authentication service of SLURM clusters: munged on each host
// shares one key, a process asks its local munged for a credential naming
// its uid and gid, and any munged with the same key decodes it, checking its
// time to live and refusing a credential it decoded before. The payload is
// chosen by the client: here lease_request_binding() of the request followed
// by its SLURM job id, so a credential proves who sent this very request.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "resource_manager/owner.hpp"

namespace rfaas::protocol {
struct LeaseRequest;
}

namespace rfaas::rm {

/// How the resource manager authenticates clients (configuration "auth").
enum class ClientAuthMode { None, Munge };
inline const char *to_string(ClientAuthMode m) {
  return m == ClientAuthMode::Munge ? "munge" : "none";
}
inline bool parse_client_auth_mode(std::string_view text, ClientAuthMode &out) {
  if (text == "none")
    out = ClientAuthMode::None;
  else if (text == "munge")
    out = ClientAuthMode::Munge;
  else
    return false;
  return true;
}

/// What a verified LeaseRequest says of its sender.
struct ClientIdentity {
  /// kAnonymousOwner when unauthenticated.
  uint32_t owner_uid = kAnonymousOwner;
  uint32_t owner_gid = kAnonymousOwner;
  /// The client's SLURM job id; empty outside a job (or unauthenticated).
  std::string job_id;
};

/// Checks LeaseRequest credentials. Not thread-safe in the sense that it
/// must be called from one thread at a time (the loop's); each call asks
/// munged over its Unix socket and blocks until it answers.
class ClientAuth {
public:
  /// `munge_socket`: munged's socket; empty for libmunge's default
  /// (/run/munge/munge.socket.2).
  ClientAuth(ClientAuthMode mode, std::string munge_socket);

  ClientAuthMode mode() const { return mode_; }
  /// One line for the start-up log: what clients are trusted as.
  std::string describe() const;

  /// With auth "none": an anonymous identity, always true. With "munge":
  /// true with the credential's uid, gid and job id, or false with `why`
  /// naming the refusal for the client ("missing", "expired", "replayed",
  /// "from another MUNGE realm", "not bound to this request", ...).
  bool verify(const protocol::LeaseRequest &request, ClientIdentity &who, std::string &why) const;

private:
  ClientAuthMode mode_;
  std::string socket_;
};

} // namespace rfaas::rm
