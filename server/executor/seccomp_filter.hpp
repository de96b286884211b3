// The system calls a function may not make. Installed by the executor once its
// links are up and before the client's library is loaded (so the library's
// constructors already run under it), on every thread of the process at once.
//
// A refused call fails with EPERM instead of killing the process: a function
// sees an error it can report, and the executor stays able to tell its client
// what happened. The list is a deny list on top of the namespaces, the uid
// change and no_new_privs: it closes what those leave open inside the
// sandbox (the kernel's attack surface, other processes' memory, new
// namespaces, program execution, and sockets where the fabric needs none).
#pragma once

#include <string>

namespace rfaas::executor_process {

struct SeccompOptions {
  /// The fabric may open TCP sockets after its links are up (a reliable-
  /// datagram layer over TCP connects lazily and reconnects): socket() of
  /// AF_INET/AF_INET6 stream sockets stays allowed. Every other family and
  /// type (raw, packet, netlink, unix) is refused either way.
  bool allow_inet_stream = false;
};

/// Install the filter on every thread of the calling process. Returns false
/// with the reason in `error` (no change then).
bool install_seccomp(const SeccompOptions &options, std::string &error) noexcept;

/// The refused calls by name, for logs and documentation.
const char *seccomp_refused_summary() noexcept;

} // namespace rfaas::executor_process
