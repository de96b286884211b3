// Per-user quotas of the resource manager: how many cores and how much memory
// one user's active leases may hold, how many leases may be active at once,
// and how many lease requests the user may send per minute.
//
// A user is the lease owner's uid when the resource manager knows it (a
// verified credential), else the client name the request carries: in an
// anonymous deployment that name is whatever the client says, so quotas
// there bound a careless client, not a hostile one (docs/security.md).
//
// Limits come from the configuration (a default and per-user overrides) and
// from the REST API; a limit set through REST is stored by the registry and
// wins over the configuration's for the same user until it is deleted.
// Plain C++, used by the Registry on the loop thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>

namespace rfaas::rm {

/// Whose quota a request counts against.
struct QuotaUser {
  /// The verified uid of the lease's owner, when known.
  std::optional<uint32_t> uid;
  /// The client name of the request (used when `uid` is unknown).
  std::string client;

  /// The key of this user in quota tables: the uid in decimal, or the
  /// client name.
  std::string key() const { return uid ? std::to_string(*uid) : client; }
  /// For messages: "uid 1000" or "client alice@host".
  std::string describe() const { return uid ? "uid " + std::to_string(*uid) : "client " + client; }
  /// The user a quota table key names: all digits (at most 10, below 2^32)
  /// is a uid, anything else a client name.
  static QuotaUser from_key(const std::string &key);
};

/// One set of limits. In a default every field is set (0: no limit); in a
/// user's override an absent field takes the default's value.
struct QuotaLimits {
  std::optional<uint64_t> cores;
  std::optional<uint64_t> memory_mib;
  /// Active leases at once.
  std::optional<uint64_t> leases;
  /// Lease requests (granted or not) within the last 60 s.
  std::optional<uint64_t> requests_per_minute;

  bool operator==(const QuotaLimits &o) const {
    return cores == o.cores && memory_mib == o.memory_mib && leases == o.leases &&
           requests_per_minute == o.requests_per_minute;
  }
  /// Each field of this one, else of `base`.
  QuotaLimits over(const QuotaLimits &base) const;
};

/// The quotas of the configuration file (the "quotas" block).
struct QuotaConfig {
  /// Every field set; all 0 (no limit) unless configured.
  QuotaLimits defaults{0, 0, 0, 0};
  /// Per user key (QuotaUser::key()).
  std::map<std::string, QuotaLimits> users;
};

/// What a user's active leases hold now.
struct QuotaUsage {
  uint64_t cores = 0;
  uint64_t memory_mib = 0;
  uint64_t leases = 0;
};

/// Where a user's effective limits come from.
enum class QuotaSource { Default, Config, Rest };
const char *to_string(QuotaSource s);

class Quotas {
public:
  explicit Quotas(QuotaConfig config = {});

  /// The limits that apply to `user` (every field set) and where they come from.
  QuotaLimits effective(const QuotaUser &user, QuotaSource *source = nullptr) const;
  /// The default that applies (REST's if set, else the configuration's).
  QuotaLimits default_limits() const;

  /// Whether `user`, holding `usage`, may be granted `cores` and
  /// `memory_mib` more in one more lease. Empty when it may; else the
  /// refusal the client sees, naming the quota ("quota exceeded: cores 8 of
  /// 8 in use for uid 1000; this request asks for 2 more").
  std::string check_holding(const QuotaUser &user, const QuotaUsage &usage, uint64_t cores,
                            uint64_t memory_mib) const;
  /// Counts one lease request of `user` at `now_ms` against its requests
  /// per minute. Empty when it is within the quota (and then counted); else
  /// the refusal (a refused request is not counted, so a client that backs
  /// off gets through again).
  std::string count_request(const QuotaUser &user, uint64_t now_ms);
  /// Requests of `user` counted within the minute before `now_ms`.
  uint64_t recent_requests(const QuotaUser &user, uint64_t now_ms) const;
  /// Forgets the request times older than a minute (users who stopped
  /// asking): keeps the table as small as the set of active users.
  void forget_idle(uint64_t now_ms);

  // ---- REST overrides (the Registry stores them first) ------------------------
  /// Sets the default (every field must be set) or a user's override.
  void set_rest_default(const QuotaLimits &limits) { rest_default_ = limits; }
  void set_rest_user(const std::string &key, const QuotaLimits &limits) {
    rest_users_[key] = limits;
  }
  /// Drops a REST override; the configuration's (or the default) applies again.
  bool remove_rest_user(const std::string &key) { return rest_users_.erase(key) > 0; }
  void remove_rest_default() { rest_default_.reset(); }

  const QuotaConfig &config() const { return config_; }
  const std::optional<QuotaLimits> &rest_default() const { return rest_default_; }
  const std::map<std::string, QuotaLimits> &rest_users() const { return rest_users_; }

private:
  QuotaConfig config_;
  std::optional<QuotaLimits> rest_default_;
  std::map<std::string, QuotaLimits> rest_users_;
  /// Per user key: the times (ms) of its counted requests in the last minute.
  std::map<std::string, std::deque<uint64_t>> requests_;
};

} // namespace rfaas::rm
