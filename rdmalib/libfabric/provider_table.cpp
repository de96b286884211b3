#include <unistd.h>

#include "provider_table.hpp"
#include <cerrno>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <rdma/fabric.h>

namespace rdmalib::lf {

const std::vector<ProviderPolicy> &provider_table() {
  static const std::vector<ProviderPolicy> table = {
      {"verbs",
       {"ibverbs", "verbs-msg"},
       EndpointType::Connected,
       0,
       false,
       "InfiniBand / RoCE through libfabric; connected endpoints"},
      {"efa",
       {"aws-efa"},
       EndpointType::ReliableDatagram,
       1,
       false,
       "AWS Elastic Fabric Adapter; reliable datagrams only"},
      {"cxi", {}, EndpointType::ReliableDatagram, 2, false, "HPE Slingshot"},
      {"verbs;ofi_rxm",
       {"verbs-rdm", "verbs-rxm"},
       EndpointType::ReliableDatagram,
       3,
       false,
       "verbs under the RxM utility layer"},
      {"tcp",
       {"tcp-msg"},
       EndpointType::Connected,
       10,
       false,
       "kernel TCP; manual progress; no atomics"},
      {"tcp;ofi_rxm",
       {"rxm", "tcp-rdm", "tcp-rxm"},
       EndpointType::ReliableDatagram,
       11,
       false,
       "tcp under RxM; connects lazily; atomics emulated by RxM"},
      {"shm",
       {"shared-memory"},
       EndpointType::ReliableDatagram,
       20,
       true,
       "processes on one node only; virtual addressing; atomics"},
      {"sockets",
       {},
       EndpointType::Connected,
       30,
       false,
       "functional fallback with a progress thread per endpoint; wait, do not spin"},
  };
  return table;
}

const ProviderPolicy *find_provider(const std::string &name) {
  for (const auto &p : provider_table()) {
    if (name == p.name)
      return &p;
    for (const char *a : p.aliases)
      if (name == a)
        return &p;
  }
  return nullptr;
}

std::string provider_names() {
  std::string out;
  for (const auto &p : provider_table()) {
    if (!out.empty())
      out += ", ";
    out += p.name;
    if (!p.aliases.empty()) {
      out += " (alias";
      for (const char *a : p.aliases) {
        out += " ";
        out += a;
      }
      out += ")";
    }
  }
  return out;
}

namespace {

/// Set a provider variable for the releases it was measured on; newer releases
/// may change the default, and an operator's own setting always wins.
void default_env_for_measured_releases(const char *name, const char *value) {
  if (FI_MAJOR(fi_version()) != 1 || FI_MINOR(fi_version()) > 20)
    return;
  setenv(name, value, /*overwrite=*/0);
}

} // namespace

void quirk_rxm_cm_progress_interval() {
  default_env_for_measured_releases("FI_OFI_RXM_CM_PROGRESS_INTERVAL", "100");
}

void quirk_sockets_pe_waittime() {
  default_env_for_measured_releases("FI_SOCKETS_PE_WAITTIME", "0");
}

std::string quirk_shm_endpoint_name(const std::string &host, unsigned port) {
  return "rdmalib-" + host + "-" + std::to_string(port);
}

bool quirk_shm_listener_absent(const std::string &provider, const std::string &host,
                               unsigned port) {
  if (provider != "shm")
    return false;
  return ::access(("/dev/shm/" + quirk_shm_endpoint_name(host, port)).c_str(), F_OK) != 0 &&
         errno == ENOENT;
}

bool quirk_prefers_blocking_wait(const std::string &provider) { return provider == "sockets"; }

bool quirk_cq_sread_ignores_timeout(const std::string &provider) { return provider == "shm"; }

bool quirk_atomic_operands_by_value(const std::string &provider) { return provider == "verbs"; }

size_t quirk_msg_private_data_size(const std::string &provider) {
  return provider == "verbs" ? 55 : 56;
}

bool quirk_in_process_peer_must_be_alive(const std::string &provider) { return provider == "shm"; }

} // namespace rdmalib::lf

namespace rdmalib::lf {
bool quirk_dead_peer_can_hang_progress(const std::string &provider) { return provider == "shm"; }

bool quirk_truncation_hangs_receiver(const std::string &provider) { return provider == "shm"; }

bool quirk_connreq_names_vanished_peer(const std::string &provider) { return provider == "shm"; }

bool shm_cross_memory_attach_likely() {
  const char *off = std::getenv("FI_SHM_DISABLE_CMA");
  if (off && *off && std::strchr("1yYtT", *off))
    return false;
  std::FILE *f = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
  if (!f)
    return true; // no Yama: same-user processes may read each other
  int scope = 0;
  if (std::fscanf(f, "%d", &scope) != 1)
    scope = 1;
  std::fclose(f);
  return scope == 0;
}
} // namespace rdmalib::lf
