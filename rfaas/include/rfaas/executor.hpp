// rfaas::executor: a lease of remote cores that runs functions.
//
//   rfaas::device_database devices = rfaas::device_database::load("devices.json");
//   rfaas::server_database servers = rfaas::server_database::load("servers.json");
//   rfaas::executor ex(devices.find("lo-tcp"));
//   rfaas::allocation_options opts;
//   opts.cores = 2;
//   opts.library = "build/examples/functions/libfunctions.so";
//   ex.allocate(servers.select(), opts);           // throws rfaas::Error
//   rfaas::result r = ex.execute("echo", in, out);  // never throws for the call
//   ex.deallocate();                                // also done by the destructor
//
// The client keeps its own listener: after the executor manager accepted the
// allocation, every worker thread of the remote executor connects back to it,
// advertises its input slots, and worker 0 reads the library from the client's
// memory (docs/protocol.md). An invocation is then one RDMA write-with-immediate
// of header + payload into a worker's input slot; the worker writes header +
// output into this client's result slot, and execute() busy-polls for it.
//
// Thread-safety: an executor is used by one thread at a time (its connections
// are not shared between threads, so the hot path takes no lock). Use one
// executor per thread for concurrent clients in one process. The registered
// memory calls (allocate_registered/free_registered) are thread-safe.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <rfaas/buffer.hpp>
#include <rfaas/devices.hpp>
#include <rfaas/errors.hpp>
#include <rfaas/function_name.hpp>
#include <rfaas/servers.hpp>

namespace rfaas {

/// Deadlines of every blocking step (docs/protocol.md "Deadlines").
struct timeouts {
  /// Connecting to the executor manager.
  std::chrono::milliseconds connect{5000};
  /// From the AllocationRequest to the AllocationResponse (includes starting
  /// the executor process).
  std::chrono::milliseconds allocation{10000};
  /// From the response until every worker connected and advertised its slots.
  std::chrono::milliseconds workers{10000};
  /// From the CodeHeader until every worker is Ready.
  std::chrono::milliseconds ready{10000};
  /// Default deadline of an invocation (execute(), async(), execute_parallel()).
  std::chrono::milliseconds invocation{30000};
  /// Each Shutdown message of deallocate().
  std::chrono::milliseconds shutdown{2000};
  /// How long resource_manager::lease() keeps asking a resource manager that
  /// answers "provisioning" (it is starting nodes through SLURM), at the
  /// interval it names; 0 throws Error(status::provisioning) at once.
  std::chrono::milliseconds provisioning{60000};
};

/// What to ask an executor manager for.
struct allocation_options {
  /// Worker threads = leased cores (1..256).
  uint32_t cores = 1;
  /// Memory limit of the executor in MiB; 0 = the manager's default.
  uint32_t memory_mib = 0;
  /// Path of the shared library of functions to ship (read at allocate()).
  std::string library;
  /// How long a worker busy-polls after an invocation before it sleeps:
  /// -1 always hot, 0 never hot (always warm), otherwise milliseconds.
  /// Ignored (always warm) on fabrics whose provider threads move the data
  /// (rdmalib::Progress::Thread, libfabric's sockets): spinning would only take
  /// their core. The client then also waits for results instead of spinning.
  int32_t hot_timeout_ms = 100;
  /// Largest input of one invocation, bytes (the manager limits it too).
  uint32_t max_input_size = 64 * 1024;
  /// Largest output of one invocation, bytes.
  uint32_t max_output_size = 64 * 1024;
  /// Input slots per worker: concurrent invocations one worker can queue.
  uint32_t slots = 1;
  /// The container image the executor runs in, on a manager whose sandbox
  /// is `oci`: 0 its default, n the n-th image of its operator's allow-list
  /// (executor.oci.images, docs/security.md). A manager without such an
  /// image refuses the allocation (bad_request).
  uint16_t image = 0;
  /// Lease from a resource manager; 0 and a zero token in standalone mode.
  /// Set these with rfaas::lease::options() rather than by hand.
  uint64_t lease_id = 0;
  /// The lease's token (a MAC the node verifies with its secret).
  std::array<uint8_t, 16> token{};
  /// What the token covers, shown to the executor manager before the
  /// request (it recomputes the token from them): the lease's expiry
  /// (milliseconds since the Unix epoch), this node's cores and memory of
  /// the lease, and the client it was granted to. Not sent when
  /// lease_cores is 0.
  uint64_t lease_expiry_ms = 0;
  /// Cores the lease grants on this node.
  uint32_t lease_cores = 0;
  /// Memory the lease grants on this node, MiB.
  uint64_t lease_memory_mib = 0;
  /// The client name the lease was granted to; the node checks it against the token.
  std::string lease_client;
  /// The uid the resource manager authenticated for the lease
  /// (rfaas::lease::owner_uid); the node checks it against the token.
  uint32_t lease_owner_uid = 0xffffffffu;
};

/// When each cold-start phase of the last allocate() ended, measured from the
/// start of allocate() (steady clock).
struct cold_start {
  /// The manager accepted the connection (ConnectReply ok).
  std::chrono::nanoseconds connected{0};
  /// The AllocationResponse arrived (the executor process exists).
  std::chrono::nanoseconds allocated{0};
  /// Every worker connected back and advertised its input slots.
  std::chrono::nanoseconds workers_connected{0};
  /// The CodeHeader reached worker 0 (it now reads the library).
  std::chrono::nanoseconds code_shipped{0};
  /// Every worker loaded the library and sent Ready: allocate() returns.
  std::chrono::nanoseconds ready{0};
};

/// Outcome of one invocation.
struct result {
  /// ok, or why the invocation produced no output.
  rfaas::status status = status::ok;
  /// Bytes of output in the caller's output buffer (ok only).
  uint32_t output_size = 0;
  /// Extra fact for an error: the signal (function_crashed), the size the
  /// function produced (output_too_large), the largest payload
  /// (payload_too_large), the unknown name hash (unknown_function).
  uint32_t detail = 0;

  /// True when the output is valid.
  bool ok() const noexcept { return status == status::ok; }
  /// ok(), for `if (auto r = ex.execute(...))`.
  explicit operator bool() const noexcept { return ok(); }
};

/// Where the bytes of this executor's invocations travelled (counted since
/// the executor was created; docs/runtime.md "Where data is copied").
struct copy_counters {
  /// Inputs written to the worker straight from rfaas::allocator memory.
  uint64_t inputs_in_place = 0;
  /// Inputs copied into a registered staging slot first (other memory, or
  /// a block whose header room another invocation in flight uses).
  uint64_t inputs_copied = 0;
  /// Successful results the worker wrote straight into the caller's output
  /// (rfaas::allocator memory): no copy on the client.
  uint64_t results_in_place = 0;
  /// Successful results copied out of a result slot into the caller's output.
  uint64_t results_copied = 0;
  /// Blocks re-registered (new key) because an invocation whose result they
  /// were to receive was abandoned after its deadline.
  uint64_t targets_revoked = 0;
};

class async_result;

/// A client's allocation of workers on one executor manager: allocate, ship the
/// library, invoke. Move-only.
class executor {
public:
  /// Open the network on `dev` and start the client's listener. Throws
  /// rfaas::Error(phase::configuration) when the device cannot be opened or
  /// the listener cannot bind (the message carries the backend's text).
  explicit executor(const device &dev, const timeouts &deadlines = {});
  /// Deallocates (never throws).
  ~executor();
  /// Takes over the allocation; the source is left unallocated. Not while
  /// rfaas::allocator blocks exist.
  executor(executor &&) noexcept;
  /// Deallocates the current allocation, then takes over the source's.
  executor &operator=(executor &&) noexcept;
  executor(const executor &) = delete;
  executor &operator=(const executor &) = delete;

  /// Lease `options.cores` cores on `manager`, ship the library, and return
  /// when every worker is ready. Throws rfaas::Error naming the phase that did
  /// not finish, the manager and its status (resources_unavailable,
  /// lease_invalid, version_mismatch, library_invalid, timeout, ...); nothing
  /// stays allocated after a throw. Throws Error(phase::usage) when already
  /// allocated. An executor that dies before its workers connected (killed,
  /// crashed, out of memory) fails the call as soon as the manager reports it,
  /// not at the `workers` deadline: phase::workers, status shutting_down, the
  /// message naming the allocation, the node and the cause ("... ended before
  /// its workers connected (0 of 4): the executor on node n1: killed by signal
  /// 9 (Killed)"). The executor may allocate again.
  void allocate(const server &manager, const allocation_options &options);
  /// Shorthand with the other options at their defaults.
  void allocate(const server &manager, uint32_t cores, uint32_t memory_mib,
                const std::string &library, int32_t hot_timeout_ms = 100);

  /// Tell every worker and the manager that the allocation ends, and close.
  /// Idempotent; never throws (problems are logged). Results of unfinished
  /// invocations become `closed`.
  void deallocate() noexcept;

  /// True between a successful allocate() and deallocate().
  bool allocated() const noexcept;
  /// Workers (leased cores) of the current allocation; 0 when none.
  uint32_t workers() const noexcept;
  /// Input slots per worker.
  uint32_t slots() const noexcept;
  /// The manager's id of this allocation, as its logs and accounting name it.
  uint64_t allocation_id() const noexcept;
  /// Largest input and output of one invocation in this allocation.
  uint32_t max_input_size() const noexcept;
  /// Largest output of one invocation, bytes.
  uint32_t max_output_size() const noexcept;
  /// Phases of the last successful allocate().
  const cold_start &cold_start_times() const noexcept;
  /// "provider=tcp endpoint=connected ...": the network in use, for logs.
  std::string describe_network() const;

  /// Run `function` on `input` and copy its output into `output`; returns
  /// when the result arrived or the deadline passed (busy-polling meanwhile).
  /// Never throws for the invocation's outcome: see result::status. Throws
  /// Error(phase::usage) when not allocated.
  ///
  /// Zero copy: when input.data is the start of memory from rfaas::allocator
  /// (a std::vector<T, rfaas::allocator<T>>), the payload is written straight
  /// from it; other memory is copied into a registered staging slot first.
  /// Likewise, when output.data is the start of such memory, the worker
  /// writes the result straight into it; otherwise the result lands in a
  /// result slot and is copied into `output`. Either way the bytes of
  /// `output` past result::output_size are unspecified. After a timeout the
  /// late result never lands in `output` (docs/runtime.md).
  /// The hot path allocates nothing and takes no lock. `function` is a name
  /// ("echo") or, to skip hashing the name on every call, a function_name
  /// made once (rfaas/function_name.hpp).
  result execute(const function_name &function, const_buffer input, mutable_buffer output);
  /// As above, with a deadline of its own instead of the allocation's.
  result execute(const function_name &function, const_buffer input, mutable_buffer output,
                 std::chrono::milliseconds timeout);

  /// Start `function` on a free slot and return at once; the invocation runs
  /// remotely meanwhile. The async_result is deferred: its get()/wait() drive
  /// the network on the calling thread, so call them from the thread that
  /// uses this executor. `input` and `output` must stay valid until get()
  /// returned (or the async_result is destroyed). One consumed after
  /// deallocate() yields status `closed`. When every slot is busy it is ready
  /// at once with status `busy`. It converts to std::future<result>.
  async_result async(const function_name &function, const_buffer input, mutable_buffer output);

  /// Run `function` once per input, spread over every worker and slot (input
  /// i on worker i % workers() first), outputs[i] receiving input i's output.
  /// More inputs than workers x slots are queued. Returns one result per input,
  /// in order; invalid_argument (for each) when the counts differ.
  std::vector<result> execute_parallel(const function_name &function,
                                       const std::vector<const_buffer> &inputs,
                                       const std::vector<mutable_buffer> &outputs);

  /// How the data of this executor's invocations travelled so far.
  const copy_counters &copies() const noexcept;

  /// Registered memory for rfaas::allocator: `bytes` usable bytes, aligned to
  /// 64, preceded by room for the invocation or result header. Registered for
  /// remote write: this executor's workers write results into it when it is
  /// an invocation's output. Throws std::bad_alloc.
  /// Thread-safe. The executor must outlive the memory and must not be moved
  /// while such memory exists.
  void *allocate_registered(size_t bytes);
  /// Release memory from allocate_registered(). Thread-safe; nullptr is a no-op.
  void free_registered(void *p) noexcept;

  struct impl;

private:
  std::shared_ptr<impl> impl_;
};

/// The pending result of one executor::async() invocation, collected once
/// with get() on the thread that uses the executor (like a std::future of
/// std::async(std::launch::deferred): get() and wait() poll the network
/// there). Unlike such a future it allocates nothing and makes no system
/// call: every std::future value is set through std::call_once, whose
/// pthread_once ends in a futex wake-up (glibc), and that system call took
/// longer than the rest of a pipelined shared-memory invocation on the
/// client. Converts to std::future<result> (at that cost) for code that
/// keeps those. Move-only.
class async_result {
public:
  async_result() noexcept = default;
  /// Takes over the pending invocation; `other` is left empty.
  async_result(async_result &&other) noexcept;
  /// Abandons the current invocation, if any, then takes over `other`'s.
  async_result &operator=(async_result &&other) noexcept;
  async_result(const async_result &) = delete;
  async_result &operator=(const async_result &) = delete;
  /// An invocation never collected is abandoned: its late result is read by
  /// nobody and never reaches `output`, and its slot is free again once that
  /// result has arrived.
  ~async_result();

  /// True until get() (or a move) took the result.
  bool valid() const noexcept { return state_ != state::empty; }
  /// The invocation's result (waiting for it as execute() does, up to the
  /// executor's invocation deadline); afterwards valid() is false. Throws
  /// std::future_error (no_state) when !valid().
  result get();
  /// Wait for the result without taking it: get() then returns at once.
  /// Throws std::future_error (no_state) when !valid().
  void wait();
  /// std::future_status::ready when the result is known (refused at once,
  /// or seen by wait()), otherwise deferred: as for a deferred std::future,
  /// nothing polls before get() or wait().
  template <class Rep, class Period>
  std::future_status wait_for(const std::chrono::duration<Rep, Period> &) const noexcept {
    return state_ == state::ready ? std::future_status::ready : std::future_status::deferred;
  }
  /// A deferred std::future whose get() calls this one's.
  operator std::future<result>() &&;

private:
  friend class executor;
  enum class state : uint8_t { empty, pending, ready };
  void abandon() noexcept;

  std::weak_ptr<executor::impl> owner_;
  uint64_t generation_ = 0;
  uint32_t worker_ = 0, slot_ = 0;
  std::chrono::milliseconds timeout_{0};
  result ready_{};
  state state_ = state::empty;
};

} // namespace rfaas
