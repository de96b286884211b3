// Fabric, once for every backend: opening (the backend negotiates, the mask
// is applied here), the accessors, describe() and the static queries.
#include <chrono>
#include <string>

#include <rdmalib/connection.hpp>
#include <rdmalib/fabric.hpp>

#include "backend.hpp"
#include "common/logging.hpp"
#include "frontend/link.hpp"

namespace rdmalib {

namespace detail {

void apply_mask(Capabilities &c, CapabilityMask m) noexcept {
  if (m.disables(CapRemoteCqData))
    c.remote_cq_data = false;
  if (m.disables(CapAtomics))
    c.atomics = false;
  if (m.disables(CapVirtualAddressing))
    c.virtual_addressing = false;
  if (m.disables(CapWaitFd))
    c.wait_fd = false;
  if (m.disables(CapInline))
    c.max_inline = 0;
  if (m.disables(CapSharedEndpoint))
    c.shared_endpoint = false;
  // The emulated write-with-immediate is a write plus a notification
  // message, which takes a posted receive at the target like verbs' and
  // efa's native immediate does.
  if (!c.remote_cq_data) {
    c.write_consumes_receive = true;
    c.notify_message_size = sizeof(ControlMessage);
  } else {
    c.notify_message_size = 0;
  }
}

} // namespace detail

void Fabric::Deleter::operator()(detail::FabricImpl *p) const noexcept { delete p; }

Fabric::Fabric(const DeviceConfig &config, CapabilityMask mask) : impl_(new detail::FabricImpl) {
  const auto start = std::chrono::steady_clock::now();
  detail::FabricImpl &f = *impl_;
  f.config = config;
  f.mask = mask;
  f.open();
  const bool offered_virtual = f.caps.virtual_addressing;
  detail::apply_mask(f.caps, mask);
  if (offered_virtual && !f.caps.virtual_addressing && !mask.disables(CapVirtualAddressing))
    throw Error(ErrorKind::Backend, "rdmalib: internal error: virtual addressing lost");
  f.finish();
  logger().info("{}", describe());
  logger().debug("fabric open for device '{}' in {} ms", config.name,
                 std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::steady_clock::now() - start)
                     .count());
}

Fabric::~Fabric() = default;
Fabric::Fabric(Fabric &&) noexcept = default;
Fabric &Fabric::operator=(Fabric &&) noexcept = default;

const Capabilities &Fabric::capabilities() const noexcept { return impl_->caps; }
const std::string &Fabric::provider() const noexcept { return impl_->provider; }
const DeviceConfig &Fabric::device() const noexcept { return impl_->config; }
CapabilityMask Fabric::mask() const noexcept { return impl_->mask; }

std::string Fabric::describe() const {
  const detail::FabricImpl &f = *impl_;
  std::string s = std::string("rdmalib backend=") + backend_name() + " " + backend_version() +
                  " provider=" + f.provider;
  std::string details = f.describe_details();
  if (!details.empty())
    s += " " + details;
  std::string m = f.mask.to_string();
  if (!m.empty())
    s += " masked=" + m;
  return s + " " + f.caps.describe();
}

bool Fabric::prepare(const ConnectionOptions &options, Refill refill) {
  return impl_->prepare(detail::with_defaults(*impl_, options), refill);
}
Fabric::PreparedEndpoints Fabric::prepared() const { return impl_->prepared(); }
bool Fabric::names_own_endpoint(const Address &address) const noexcept {
  return impl_->names_own_endpoint(address);
}

const char *Fabric::backend_name() noexcept { return detail::FabricImpl::backend_name(); }
std::string Fabric::backend_version() { return detail::FabricImpl::backend_version(); }
std::vector<ProviderInfo> Fabric::discover() { return detail::FabricImpl::discover(); }
std::vector<std::string> Fabric::known_providers() { return detail::FabricImpl::known_providers(); }
std::string Fabric::canonical_provider(const std::string &name_or_alias) {
  return detail::FabricImpl::canonical_provider(name_or_alias);
}
void Fabric::preload(const DeviceConfig &config) { detail::FabricImpl::preload(config); }
Fabric::ConfinementNeeds Fabric::confinement_needs(const DeviceConfig &config) {
  return detail::FabricImpl::confinement_needs(config);
}
void Fabric::isolate_tenants() noexcept { detail::FabricImpl::isolate_tenants(); }
Fabric::ReclaimReport Fabric::reclaim_stale(std::chrono::seconds min_age) {
  return detail::FabricImpl::reclaim_stale(min_age);
}

} // namespace rdmalib
