// Errors of librfaas.
//
// Two channels, like rdmalib underneath:
//  * setup (device and server databases, allocate(), deallocate()) throws
//    rfaas::Error, which says in which phase, against which executor manager
//    and with which status the step failed;
//  * invocations never throw for what the function or the executor did: they
//    return an rfaas::result whose status says what happened (unknown
//    function, payload too large, crash, timeout, ...). Only misuse of the API
//    (calling execute() on an executor that is not allocated) is thrown.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace rfaas {

/// Outcome of an invocation or of a setup step. Values 0..12 are the wire
/// protocol's ErrorCode (docs/protocol.md) and mean what the peer said; the
/// values from 64 on are found locally by the client.
enum class status : uint16_t {
  ok = 0,
  /// No function of that name in the shipped library.
  unknown_function = 1,
  /// The input does not fit an input slot (allocation_options::max_input_size).
  payload_too_large = 2,
  /// The function produced more than the result slot
  /// (allocation_options::max_output_size) or the output buffer holds.
  output_too_large = 3,
  /// The function raised a fatal signal (result::detail holds it). After a
  /// write past the output capacity (a guard page) the worker goes on
  /// serving; after any other crash the executor ends, later calls on this
  /// allocation return `closed`.
  function_crashed = 4,
  /// The lease or allocation is unknown, expired or not ours. Also the
  /// result of invocations on an allocation whose lease ended (expired on
  /// the node's clock, revoked, released): its workers say so as they go.
  lease_invalid = 5,
  /// The peer speaks another protocol version (it said so, or its message
  /// carried another version).
  version_mismatch = 6,
  /// A failure on the peer's side (see the message of the Error).
  internal = 7,
  /// A message was malformed: the peer found one of ours so, or the client
  /// could not decode the peer's (or it was of the wrong type).
  bad_request = 8,
  /// The executor manager has not enough free cores or memory.
  resources_unavailable = 9,
  /// The library could not be read, failed its checksum, or did not load.
  library_invalid = 10,
  /// The peer is ending the allocation.
  shutting_down = 11,
  /// A deadline passed (on the peer, or locally for an invocation).
  timeout = 12,
  /// The resource manager is starting nodes for this request (a SLURM pilot
  /// job); resource_manager::lease() asks again until
  /// timeouts::provisioning has passed, then throws with this status.
  provisioning = 13,

  /// The connection to the worker is gone (executor ended or crashed).
  closed = 64,
  /// A network operation failed locally (see the log for the backend's text).
  network_error = 65,
  /// Every input slot is busy (asynchronous calls beyond workers x slots).
  busy = 66,
  /// An argument is unusable (no inputs, mismatched input/output counts).
  invalid_argument = 67,
};

/// Stable short name: "ok", "unknown_function", "closed", ...
const char *to_string(status s) noexcept;

/// The step of an allocation (or of the client's own setup) an Error is about.
enum class phase : uint8_t {
  /// Reading a database or the function library, opening the network.
  configuration,
  /// Connecting to the executor manager (ClientHello / ConnectReply).
  connect,
  /// The AllocationRequest and its AllocationResponse.
  allocation,
  /// Workers connecting to the client and advertising their input slots.
  workers,
  /// Shipping the library to worker 0 and collecting every worker's Ready.
  code,
  /// Deallocation (Shutdown to workers and manager).
  deallocation,
  /// Any use of the executor in the wrong state.
  usage,
  /// Leasing, renewing or releasing at the resource manager.
  lease,
};

/// The phase's name as it appears in Error::what() ("allocation", "lease", ...).
const char *to_string(phase p) noexcept;

/// The one exception type of librfaas. what() is a complete sentence:
/// "rfaas: allocation at 127.0.0.1:10000 failed: resources_unavailable: ...".
class Error : public std::runtime_error {
public:
  /// Builds the message from the phase, the manager's address, the status and `detail`.
  Error(phase ph, std::string manager, status st, const std::string &detail);

  /// Which step failed.
  phase where() const noexcept { return phase_; }
  /// "host:port" of the executor manager involved ("" when none).
  const std::string &manager() const noexcept { return manager_; }
  /// The status the peer answered with, or the local one (timeout,
  /// network_error, ...).
  status code() const noexcept { return status_; }

private:
  phase phase_;
  std::string manager_;
  status status_;
};

} // namespace rfaas
