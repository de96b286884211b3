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

#include <linux/filter.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace rfaas::executor_process {

struct SeccompOptions {
  /// The fabric may open TCP sockets after its links are up (a reliable-
  /// datagram layer over TCP connects lazily and reconnects): socket() of
  /// AF_INET/AF_INET6 stream sockets stays allowed. Every other family and
  /// type (raw, packet, netlink, unix) is refused either way.
  bool allow_inet_stream = false;
};

/// The filter compiled to its BPF program, for the process that compiled it
/// (it names that process's pid) and the options it was compiled for.
/// Compiling takes ~0.3 ms of a core (libseccomp resolves and orders the
/// rules); a pooled executor compiles it while it waits for an allocation,
/// so that sealing the sandbox on the cold start's critical path is one
/// system call.
struct SeccompProgram {
  std::vector<sock_filter> code;
  SeccompOptions options;
  pid_t pid = 0;
  /// Compiled for `o` in this process.
  bool fits(const SeccompOptions &o) const noexcept;
};

/// Compile the filter for `options` into `out`. False with the reason in
/// `error`.
bool compile_seccomp(const SeccompOptions &options, SeccompProgram &out,
                     std::string &error) noexcept;

/// Install the filter on every thread of the calling process: `ahead` when
/// it fits `options`, else one compiled now. Returns false with the reason
/// in `error` (no change then).
bool install_seccomp(const SeccompOptions &options, std::string &error,
                     const SeccompProgram *ahead = nullptr) noexcept;

/// The refused calls by name, for logs and documentation.
const char *seccomp_refused_summary() noexcept;

} // namespace rfaas::executor_process
