// What an executor manager tells an executor it starts: the allocation, the
// cores and memory it may use, where its client and its manager are, and the
// client's AllocationRequest as received (its result descriptors included).
//
// This is not a wire protocol between machines: the manager hands it to its own
// zygote (or to a freshly executed executor) on the same node through a pipe or
// a memfd, so it is a simple text form ("key value" lines, binary fields in
// hex) that is easy to read in a debugger and strict to parse.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <rdmalib/device.hpp>

#include "common/hex.hpp"
#include "protocol/protocol.hpp"
#include "protocol/rm_messages.hpp"

namespace rfaas::server {

/// Process exit codes of an executor, reported by the zygote to the manager:
/// the manager acts on them, so both sides take them from here.
enum ExecutorExit : int {
  /// The client shut down or disconnected.
  ExitOk = 0,
  /// Setup failed (fabric, connections, library).
  ExitSetupFailed = 1,
  /// A function crashed; the client got FunctionCrashed.
  ExitFunctionCrashed = 3,
  /// Ended by SIGTERM (the manager ended the allocation).
  ExitTerminated = 4,
  /// The client stopped answering without closing its links: a result or a
  /// liveness probe could not reach it. On fabrics that report no dead peer
  /// (tcp;ofi_rxm, efa) this is how the manager learns that the client is
  /// gone, so it drops the client's link too.
  ExitClientLost = 5,
  /// The client wrote outside its input slots (into a guard page between
  /// them, inside the buffer it was given): the write was refused, the
  /// client got Shutdown{bad_request}, and the executor's log line gives the
  /// offset. Also the exit of an executor whose guard page could not be
  /// opened for the provider (then it was killed by that write).
  ExitRemoteWriteFault = 6,
};

class SpecError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

struct LaunchSpec {
  uint64_t allocation_id = 0;
  /// Presented back to the manager in ExecutorHello.
  protocol::Token secret;
  /// CPU ids, one per worker (worker i is pinned to cores[i]).
  std::vector<int> cores;
  /// Data-segment limit of the executor process, MiB (0 = none).
  uint32_t memory_mib = 0;
  /// The device the executor opens (the manager's, with its overrides).
  rdmalib::DeviceConfig device;
  /// The manager's listener, for the accounting connection.
  std::string manager_host;
  uint16_t manager_port = 0;
  /// Deadlines, milliseconds.
  uint32_t connect_ms = 5000;
  uint32_t library_loaded_ms = 10000;
  /// Install the seccomp filter once the links are up, before the library
  /// is loaded (server/executor/seccomp_filter.hpp).
  bool seccomp = false;
  /// The uid of the lease's owner as its verified token says
  /// (protocol::kAnonymousUid: none, or a standalone manager). A root
  /// zygote runs the executor as this uid (Sandbox::identity_for).
  uint32_t owner_uid = protocol::kAnonymousUid;
  /// The client's AllocationRequest and its descriptors, encoded as received.
  std::vector<uint8_t> request;

  /// Text form. Never fails.
  std::string serialize() const;
  /// Parse the text form. Throws SpecError naming the bad line.
  static LaunchSpec parse(const std::string &text);
};

/// A hex field of any length (to_hex, common/hex.hpp, writes them); throws
/// SpecError on an odd length or a non-hex character.
std::vector<uint8_t> bytes_from_hex(const std::string &hex);

} // namespace rfaas::server
