// The opened network: provider/device, domain, and the negotiated Capabilities.
//
// Open one Fabric per process and device, early (opening is the slow part:
// loading libfabric and fi_getinfo cost ~0.3 s on Debian), then create
// Listeners, Connections and MemoryRegions from it. It must outlive all of them.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rdmalib/address.hpp>
#include <rdmalib/capabilities.hpp>
#include <rdmalib/device.hpp>

namespace rdmalib {

struct ConnectionOptions;

namespace detail {
struct FabricImpl;
struct Internals;
} // namespace detail

/// One provider/device combination found on this machine (rfaas-info, device
/// database generation).
struct ProviderInfo {
  /// Canonical provider name ("tcp", "tcp;ofi_rxm", "shm", "verbs", ...), or the
  /// device name on the verbs backend.
  std::string provider;
  /// Domain / device name ("eth0", "lo", "rxe0", "shm").
  std::string domain;
  /// Fabric name (an IP network for IP providers).
  std::string fabric;
  /// The endpoint type this provider offers on this domain.
  EndpointType endpoint = EndpointType::Connected;
  /// An address of this node on that domain, if any ("127.0.0.1").
  std::string ip_address;
};

/// An opened device: owns the provider's fabric, domain, queues and negotiated
/// Capabilities. Move-only; Listener, Connection and MemoryRegion made from it must not
/// outlive it.
class Fabric {
public:
  /// Open the device described by `config`, negotiate capabilities, then switch
  /// off whatever `mask` names. Logs one line naming backend, provider, library
  /// version and capabilities. Throws Error: NotFound for an unknown provider
  /// or device (the message lists the available ones), Unsupported when the
  /// provider misses something rdmalib cannot do without (reliable messaging,
  /// RMA), Backend otherwise.
  explicit Fabric(const DeviceConfig &config,
                  CapabilityMask mask = CapabilityMask::from_environment());
  ~Fabric();
  /// Takes over the device; the source is left empty.
  Fabric(Fabric &&) noexcept;
  /// Closes the current device as the destructor does, then takes over the source's.
  Fabric &operator=(Fabric &&) noexcept;
  Fabric(const Fabric &) = delete;
  Fabric &operator=(const Fabric &) = delete;

  /// Negotiated capabilities (mask applied). Thread-safe.
  const Capabilities &capabilities() const noexcept;
  /// The provider actually opened ("tcp", "tcp;ofi_rxm", "verbs" ...).
  const std::string &provider() const noexcept;
  /// The configuration this fabric was opened from (port as configured).
  const DeviceConfig &device() const noexcept;
  /// The mask in force.
  CapabilityMask mask() const noexcept;
  /// "backend=libfabric 1.17.0 provider=tcp domain=lo endpoint=connected ...":
  /// the start-up log line.
  std::string describe() const;

  /// Whether prepare() opens another endpoint after one was taken.
  enum class Refill {
    /// Yes, once the process has made no connection of that kind for
    /// kRefillQuietMs: a connection being set up (and whatever the process
    /// does right after it) never shares the cores with the next opening.
    Keep,
    /// No: the process makes that connection once (an executor's links).
    Once,
  };
  /// How long after a connection took a prepared endpoint the next is opened
  /// (Refill::Keep). A second connection of the kind within that time opens
  /// its own endpoint.
  static constexpr int kRefillQuietMs = 100;

  /// Keep an endpoint for connections with `options` (their send and
  /// receive depths; defaults applied as connect() applies them) opened ahead
  /// of need by a background thread, for a connect() or accept() with the
  /// same depths to take (and, with Refill::Keep, open the next a little
  /// after each take). Only where opening an endpoint is slow enough to
  /// dominate setting up a link (shm: a 16 MiB shared-memory region per
  /// endpoint, milliseconds to fill); elsewhere, and where links share one
  /// endpoint, it does nothing and returns false, so callers need not know
  /// the provider. Call it once per kind of connection a process makes or
  /// accepts repeatedly (or once, Refill::Once). Costs one idle endpoint per
  /// kind, at most four kinds (false beyond); they close with the Fabric.
  /// Asking again for a kind already kept changes nothing. Thread-safe.
  bool prepare(const ConnectionOptions &options, Refill refill = Refill::Keep);
  /// What prepare() did so far.
  struct PreparedEndpoints {
    /// Endpoints opened ahead that wait for a connection.
    size_t waiting = 0;
    /// Connections (connect or accept) that took one.
    uint64_t taken = 0;
  };
  /// Counts of endpoints opened ahead by prepare() and taken since, for logs and tests.
  PreparedEndpoints prepared() const;

  /// True when `address` names an endpoint that this process has open (a
  /// listener or a connection's endpoint) on a fabric whose endpoints are
  /// node-local named objects (shm): a peer told to connect there would
  /// connect to this process. A server that forwards addresses it was given
  /// (a client's listener, handed to an executor) refuses such an address:
  /// shm crashes a listener whose own connecting peers vanish at the wrong
  /// moment, and a process that names the server itself makes the server end
  /// exactly those peers (docs/BACKEND-BUGS.md). False where endpoints are
  /// not such objects (IP providers, verbs: compare with your own listener's
  /// address), for any other process's endpoint, for an address this fabric
  /// cannot read, and when it cannot be told. Never throws; thread-safe.
  bool names_own_endpoint(const Address &address) const noexcept;

  /// "libfabric" or "verbs": the backend chosen at build time.
  static const char *backend_name() noexcept;
  /// Version of the backend library in use at run time.
  static std::string backend_version();
  /// Every provider/device usable here, fastest first. Never throws for an
  /// empty result; throws Error(Backend) if the backend cannot be queried.
  static std::vector<ProviderInfo> discover();
  /// Provider names/aliases the backend accepts (for help texts and errors).
  static std::vector<std::string> known_providers();
  /// The canonical name of a provider name or alias as configuration may
  /// spell it ("rxm" and "tcp-rxm" give "tcp;ofi_rxm"), the name discover()
  /// reports; "" when this backend knows no such provider.
  static std::string canonical_provider(const std::string &name_or_alias);
  /// Load and initialise what opening `config` needs (libraries, providers)
  /// without keeping anything open, so that processes forked afterwards open
  /// their own Fabric fast (the executor zygote). A Fabric opened before a
  /// fork must not be used by the child, and on verbs a device context
  /// opened before it is unusable there even after the Fabric is gone (see
  /// the verbs backend), hence a call instead of a throw-away Fabric. Throws
  /// Error like the constructor.
  static void preload(const DeviceConfig &config);
  /// What a process opening `config` needs when it is confined (an
  /// executor's sandbox). With no provider configured, what any provider of
  /// the backend may need.
  struct ConfinementNeeds {
    /// Paths of the host it must see in a minimal file system: device files
    /// ("/dev/infiniband"), shared memory ("/dev/shm"), sysfs.
    std::vector<std::string> host_paths;
    /// Peers can only be processes of the same uid (libfabric shm creates
    /// its regions 0600): a confined process keeps its parent's uid.
    bool same_uid_peers = false;
    /// The provider names its endpoints and watches its peers by process id
    /// (libfabric shm: "<pid>:<uid>:<n>" regions, liveness by pid): a
    /// confined process keeps the host's PID namespace.
    bool host_pids = false;
  };
  /// What a process that opens `config` needs in a sandbox (see
  /// ConfinementNeeds). Never throws; an unknown provider gives what any
  /// provider of the backend may need.
  static ConfinementNeeds confinement_needs(const DeviceConfig &config);
  /// Call once, before the first Fabric of the process opens, in a process
  /// that serves peers it must not trust (the executor manager, executors):
  /// providers whose one-sided operations would bypass memory keys and
  /// access flags are switched to a mode in which the target checks them
  /// (libfabric shm: no cross-memory attach, so every RMA goes through the
  /// provider, which verifies key, bounds and access). Peers that link with
  /// this process adopt it. Costs bandwidth above the provider's inline size
  /// (a copy through shared memory instead of one kernel copy), nothing on
  /// smaller messages. Not thread-safe; never throws.
  static void isolate_tenants() noexcept;

  /// What reclaim_stale() removed.
  struct ReclaimReport {
    /// Names of the removed objects ("/dev/shm/rdmalib-127.0.0.1-4000").
    std::vector<std::string> names;
    /// Their total size in bytes.
    uint64_t bytes = 0;
  };
  /// Remove what processes that died without closing their endpoints (killed,
  /// crashed) left in shared system resources, which nothing else frees.
  /// On the libfabric backend: the shm provider's shared-memory regions in
  /// /dev/shm (16 MiB each; endpoints named `"<pid>:<uid>:<n>"` and rdmalib's
  /// listeners `"rdmalib-<host>-<port>"`) owned by this user, mapped by no
  /// process and unchanged for `min_age`. The verbs backend has nothing of
  /// the kind and returns an empty report. Long-lived servers call it at
  /// start; it reads `/proc/<pid>/maps` of every process (a few ms). Never
  /// throws: entries it cannot inspect are left alone.
  static ReclaimReport reclaim_stale(std::chrono::seconds min_age = std::chrono::seconds(30));

private:
  friend struct detail::Internals;
  struct Deleter {
    void operator()(detail::FabricImpl *p) const noexcept;
  };
  std::unique_ptr<detail::FabricImpl, Deleter> impl_;
};

} // namespace rdmalib
