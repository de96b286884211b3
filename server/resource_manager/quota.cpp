#include "resource_manager/quota.hpp"

#include <cctype>
#include <iterator>
#include <utility>

namespace rfaas::rm {

namespace {

constexpr uint64_t kMinuteMs = 60'000;

} // namespace

QuotaUser QuotaUser::from_key(const std::string &key) {
  QuotaUser u;
  bool digits = !key.empty() && key.size() <= 10;
  for (char c : key)
    digits = digits && std::isdigit(static_cast<unsigned char>(c));
  if (digits) {
    uint64_t v = std::stoull(key);
    if (v <= UINT32_MAX) {
      u.uid = static_cast<uint32_t>(v);
      return u;
    }
  }
  u.client = key;
  return u;
}

QuotaLimits QuotaLimits::over(const QuotaLimits &base) const {
  QuotaLimits l;
  l.cores = cores ? cores : base.cores;
  l.memory_mib = memory_mib ? memory_mib : base.memory_mib;
  l.leases = leases ? leases : base.leases;
  l.requests_per_minute = requests_per_minute ? requests_per_minute : base.requests_per_minute;
  return l;
}

const char *to_string(QuotaSource s) {
  switch (s) {
  case QuotaSource::Default:
    return "default";
  case QuotaSource::Config:
    return "config";
  case QuotaSource::Rest:
    return "rest";
  }
  return "unknown";
}

Quotas::Quotas(QuotaConfig config) : config_(std::move(config)) {
  // A default always has every field: fill the gaps with "no limit".
  config_.defaults = config_.defaults.over(QuotaLimits{0, 0, 0, 0});
}

QuotaLimits Quotas::default_limits() const {
  return rest_default_ ? rest_default_->over(config_.defaults) : config_.defaults;
}

QuotaLimits Quotas::effective(const QuotaUser &user, QuotaSource *source) const {
  const std::string key = user.key();
  const QuotaLimits base = default_limits();
  QuotaSource src = QuotaSource::Default;
  QuotaLimits l = base;
  if (auto it = rest_users_.find(key); it != rest_users_.end()) {
    src = QuotaSource::Rest;
    l = it->second.over(base);
  } else if (auto c = config_.users.find(key); c != config_.users.end()) {
    src = QuotaSource::Config;
    l = c->second.over(base);
  }
  if (source)
    *source = src;
  return l;
}

std::string Quotas::check_holding(const QuotaUser &user, const QuotaUsage &usage, uint64_t cores,
                                  uint64_t memory_mib) const {
  const QuotaLimits l = effective(user);
  const std::string who = user.describe();
  // Usage may exceed a limit that was lowered while leases were active:
  // those leases stay, new ones wait until enough of them ended.
  if (*l.leases && usage.leases + 1 > *l.leases)
    return "quota exceeded: leases " + std::to_string(usage.leases) + " of " +
           std::to_string(*l.leases) + " active for " + who;
  if (*l.cores && usage.cores + cores > *l.cores)
    return "quota exceeded: cores " + std::to_string(usage.cores) + " of " +
           std::to_string(*l.cores) + " in use for " + who + "; this request asks for " +
           std::to_string(cores) + " more";
  if (*l.memory_mib && usage.memory_mib + memory_mib > *l.memory_mib)
    return "quota exceeded: memory " + std::to_string(usage.memory_mib) + " of " +
           std::to_string(*l.memory_mib) + " MiB in use for " + who + "; this request asks for " +
           std::to_string(memory_mib) + " MiB more";
  return {};
}

std::string Quotas::count_request(const QuotaUser &user, uint64_t now_ms) {
  const QuotaLimits l = effective(user);
  std::deque<uint64_t> &times = requests_[user.key()];
  while (!times.empty() && times.front() + kMinuteMs <= now_ms)
    times.pop_front();
  if (*l.requests_per_minute && times.size() >= *l.requests_per_minute) {
    // The oldest counted request leaves the window first.
    const uint64_t wait_ms = times.front() + kMinuteMs - now_ms;
    return "quota exceeded: lease requests " + std::to_string(times.size()) + " of " +
           std::to_string(*l.requests_per_minute) + " per minute for " + user.describe() +
           "; retry in " + std::to_string((wait_ms + 999) / 1000) + " s";
  }
  times.push_back(now_ms);
  return {};
}

uint64_t Quotas::recent_requests(const QuotaUser &user, uint64_t now_ms) const {
  auto it = requests_.find(user.key());
  if (it == requests_.end())
    return 0;
  uint64_t n = 0;
  for (uint64_t t : it->second)
    n += t + kMinuteMs > now_ms;
  return n;
}

void Quotas::forget_idle(uint64_t now_ms) {
  for (auto it = requests_.begin(); it != requests_.end();) {
    std::deque<uint64_t> &times = it->second;
    while (!times.empty() && times.front() + kMinuteMs <= now_ms)
      times.pop_front();
    it = times.empty() ? requests_.erase(it) : std::next(it);
  }
}

} // namespace rfaas::rm
