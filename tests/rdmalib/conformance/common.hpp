// Shared pieces of the rdmalib conformance suite: parameters (provider
// configuration x capability mask), the table of capabilities each provider is
// expected to lack, two-sided test drivers and process helpers.
//
// Rules the suite follows (see DESIGN §3 facts):
//  * every blocking step has a deadline; readiness is waited for, never slept on;
//  * both sides of a link are driven by their own thread (or process): with
//    manual progress a side that neither polls nor waits stalls its peer;
//  * completions are waited for with Operations::wait (sockets starves under
//    busy polling on 2 cores).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <sys/types.h>

#include <rdmalib/rdmalib.hpp>

#include "peer_protocol.hpp"

namespace conformance {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

/// Deadline of every setup step and every awaited completion.
constexpr std::chrono::milliseconds kDeadline{10000};
constexpr int kDeadlineMs = 10000;
/// Extra time allowed beyond a deadline before calling it missed (scheduling on
/// a loaded 2-core machine).
constexpr std::chrono::milliseconds kSlack{2500};

// ---- parameters ---------------------------------------------------------------

/// One entry of RFAAS_TEST_PROVIDERS ("tcp;ofi_rxm/rdm").
struct ProviderConfig {
  std::string text;
  std::string provider;
  rdmalib::EndpointPreference endpoint = rdmalib::EndpointPreference::Auto;
  /// "msg", "rdm" or "auto", as written.
  std::string endpoint_name;
  /// Identifier-safe form for test names ("tcp_ofi_rxm_rdm").
  std::string label;
};

/// A capability mask the suite runs with.
struct MaskConfig {
  /// Test-name suffix ("native", "no_remote_cq_data").
  std::string label;
  /// CapabilityMask::parse() input ("remote_cq_data,atomics").
  std::string caps;
};

struct Param {
  ProviderConfig provider;
  MaskConfig mask;
};

/// The configured provider list: the environment variable
/// RFAAS_TEST_PROVIDERS (comma-separated) when set, else the CMake cache list.
const std::vector<ProviderConfig> &provider_configs();
/// Masks forcing each fallback: native, no_remote_cq_data, no_atomics, both,
/// no_wait_fd, all_off.
std::vector<MaskConfig> all_masks();
/// The cheaper set for process-level tests: native and all_off.
std::vector<MaskConfig> process_masks();
std::vector<Param> params(const std::vector<MaskConfig> &masks);

std::string param_name(const testing::TestParamInfo<Param> &info);
std::string provider_name(const testing::TestParamInfo<ProviderConfig> &info);
void PrintTo(const Param &p, std::ostream *os);
void PrintTo(const ProviderConfig &p, std::ostream *os);

/// Which side of a link a Fabric serves.
enum class Side { Server, Client };

/// Addresses the suite runs on (rdma_cm cannot use 127.0.0.1, and a run
/// between two RDMA devices needs one address per side):
/// RFAAS_TEST_SERVER_IP (default 127.0.0.1) is the server Fabric's ip_address
/// and the host of every Listener; RFAAS_TEST_CLIENT_IP (default: the server
/// IP) is the client Fabric's ip_address.
/// RFAAS_TEST_OPAQUE_ADDRESSES=1: both Fabrics' devices have no ip_address,
/// Listeners bind where the provider puts the device's endpoints (name the
/// domain with RFAAS_TEST_SERVER_DEVICE / RFAAS_TEST_CLIENT_DEVICE, e.g. "lo"
/// for tcp), and every address exchanged is the provider's opaque endpoint
/// name; server_ip() and client_ip() are then empty.
bool opaque_addresses();
const std::string &server_ip();
const std::string &client_ip();
/// RFAAS_TEST_SERVER_DEVICE / RFAAS_TEST_CLIENT_DEVICE: DeviceConfig::domain
/// of each side (empty by default: any device that has the address).
const std::string &server_device();
const std::string &client_device();

/// The device configuration of one side: provider, endpoint, that side's IP
/// address and domain, port 0.
rdmalib::DeviceConfig device_for(const ProviderConfig &p, Side side = Side::Server);

// ---- expectations ---------------------------------------------------------------

/// What a provider is expected to lack natively (before any mask), as a set of
/// CapabilityBits, and which bits the suite does not pin down for it.
struct Expectation {
  bool known = false;
  uint32_t absent = 0;
  uint32_t unchecked = 0;
  std::string why;
};

/// Lookup by the provider Fabric::provider() reports. The environment variable
/// RFAAS_TEST_EXPECT_UNSUPPORTED (capability names, as RDMALIB_DISABLE_CAPS)
/// overrides the table, for providers the table does not know.
Expectation expected_for(const std::string &provider);

/// True when `bit` is expected to be off: absent natively or masked.
bool expected_off(const Expectation &e, rdmalib::CapabilityMask mask, rdmalib::CapabilityBit bit);

/// The value Capabilities reports for a maskable bit.
bool capability_value(const rdmalib::Capabilities &c, rdmalib::CapabilityBit bit);
const char *capability_name(rdmalib::CapabilityBit bit);

const char *kind_name(rdmalib::ErrorKind k);
const char *op_name(rdmalib::OpKind k);

// ---- two-thread driving -------------------------------------------------------------

/// A counting event with a deadline, to hand readiness from one side to the other.
class Event {
public:
  void post();
  /// True if posted (consumes one post); false at the deadline.
  bool wait(std::chrono::milliseconds timeout = kDeadline);

private:
  std::mutex m_;
  std::condition_variable cv_;
  int count_ = 0;
};

/// Run `server` on a second thread and `client` on this one; exceptions become
/// test failures naming the side. A side that outlives every deadline aborts the
/// process rather than hang the suite.
void run_both(const std::function<void()> &server, const std::function<void()> &client);

/// Wait for exactly one completion on `q`. On timeout or error adds a failure
/// naming `what`, the status and the connection's last_error(), and returns nullopt.
std::optional<rdmalib::Completion> wait_one(rdmalib::Operations ops, rdmalib::Queue q,
                                            const std::string &what, int timeout_ms = kDeadlineMs);

/// wait_one() plus checks of kind, context and Ok status.
bool expect_completion(rdmalib::Operations ops, rdmalib::Queue q, rdmalib::OpKind kind,
                       uint64_t context, const std::string &what);

/// Expect that no completion arrives on `q` within `ms` (nothing spurious).
void expect_quiet(rdmalib::Operations ops, rdmalib::Queue q, int ms, const std::string &what);

/// An established pair of connections, server and client side.
struct Link {
  std::unique_ptr<rdmalib::Listener> listener;
  rdmalib::Connection server;
  rdmalib::Connection client;
};

/// Listen on server_ip():0 on `server_fabric`, connect from `client_fabric` with
/// 48 bytes of private data, reply with 40; checks both.
Link make_link(rdmalib::Fabric &server_fabric, rdmalib::Fabric &client_fabric,
               const rdmalib::ConnectionOptions &options = {});

/// Attach a region to a connection when the fabric binds memory to endpoints.
void attach_if_needed(rdmalib::Connection &c, const rdmalib::MemoryRegion &r);

// ---- fixtures ---------------------------------------------------------------------

/// Opens one Fabric per side (as two peers would) with the parameter's mask.
class FabricPair {
protected:
  void open_fabrics(const ProviderConfig &p, const std::string &mask_caps);
  std::unique_ptr<rdmalib::Fabric> server_fabric_;
  std::unique_ptr<rdmalib::Fabric> client_fabric_;
  rdmalib::CapabilityMask mask_{};
  Expectation expect_{};
  const rdmalib::Capabilities &caps() const { return server_fabric_->capabilities(); }
};

class ParamFixture : public testing::TestWithParam<Param>, protected FabricPair {
protected:
  void SetUp() override { open_fabrics(GetParam().provider, GetParam().mask.caps); }
};

class ProviderFixture : public testing::TestWithParam<ProviderConfig>, protected FabricPair {
protected:
  void SetUp() override { open_fabrics(GetParam(), ""); }
};

// ---- processes -----------------------------------------------------------------

/// A child process whose stdout is a pipe to us. Killed (SIGKILL) and reaped on
/// destruction if still running; dies with us (PR_SET_PDEATHSIG).
class ChildProcess {
public:
  explicit ChildProcess(const std::vector<std::string> &argv);
  ~ChildProcess();
  ChildProcess(const ChildProcess &) = delete;
  ChildProcess &operator=(const ChildProcess &) = delete;

  pid_t pid() const { return pid_; }
  /// Next stdout line starting with `prefix` (prefix stripped); other lines are
  /// copied to stderr. nullopt at the deadline or EOF.
  std::optional<std::string> read_line(const std::string &prefix,
                                       std::chrono::milliseconds timeout);
  bool running();
  void kill(int sig);
  /// The raw wait status once the child exits, nullopt at the deadline.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);
  /// "exited with 3", "killed by signal 9", "still running".
  static std::string describe_status(std::optional<int> status);

private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  std::string buffer_;
};

/// Path of the helper peer binary (compile-time from CMake).
std::string peer_binary();

/// This process's mappings of shared-memory files: start and length of each
/// mapping of /dev/shm/`name`, or with an empty `name` of every file in
/// /dev/shm (its own endpoints' regions, those of peers it mapped, and files
/// deleted since).
std::vector<std::pair<uintptr_t, size_t>> shm_mappings(const std::string &name = "");

} // namespace conformance
