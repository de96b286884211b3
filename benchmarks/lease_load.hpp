// Leasing clients at full rate against a running resource manager: N client
// processes, each looping lease + release through librfaas for a fixed time.
// rm_lease_benchmark reports it as leases per second; rm_rest_benchmark runs
// it beside REST requests to see what each costs the other.
//
// Clients are processes, not threads, because a resource_manager object is
// one thread's and a real deployment has one per application; they are
// forked before any of them opens the fabric, start together (a pipe closed
// by the parent) and die with the parent (PR_SET_PDEATHSIG). A lease refused
// for lack of free cores (more clients than cores) counts as refused, not as
// an error: the figure is then the rate of grants under contention.
#pragma once

#include <rfaas/rfaas.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace rfaas::bench {

struct LeaseLoad {
  rfaas::device device;
  /// The resource manager's fabric address, host:port.
  std::string address;
  uint32_t cores = 1;
  uint64_t memory_mib = 64;
  std::chrono::milliseconds duration{60000};
};

struct LeaseLoadResult {
  int clients = 0;
  /// Clients that connected before the start, and that sent no result.
  int connected = 0;
  int missing = 0;
  uint64_t granted = 0;
  uint64_t refused = 0;
  uint64_t errors = 0;
  /// The longest client's run (the time the rates are over).
  double seconds = 0;
  /// The median over clients of each one's median lease latency.
  double lease_median_us = 0;
  /// The clients' first errors, one each at most.
  std::vector<std::string> messages;

  double leases_per_s() const { return seconds > 0 ? static_cast<double>(granted) / seconds : 0; }
  double requests_per_s() const {
    return seconds > 0 ? static_cast<double>(granted + refused) / seconds : 0;
  }
  /// Every client connected and reported, no error, some leases.
  bool ok() const { return !missing && connected == clients && errors == 0 && granted > 0; }
};

/// Connection timeouts for a benchmark's clients: tcp;ofi_rxm connects
/// lazily, and on a loaded host 16 clients connecting at once queue behind
/// each other at the resource manager's accept.
rfaas::timeouts patient_timeouts();

/// Runs `clients` leasing processes for `seconds`. `alongside`, if given,
/// runs in this process from the clients' common start until they end (it
/// gets the planned end and should return by then): the load under which
/// something else is measured. Forks: call it before starting threads.
LeaseLoadResult
run_lease_load(const LeaseLoad &load, int clients, double seconds,
               const std::function<void(std::chrono::steady_clock::time_point)> &alongside = {});

} // namespace rfaas::bench
