// Who owns a lease: the uid the resource manager authenticated for its client,
// or nobody in particular when clients are anonymous (auth "none").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace rfaas::rm {

/// The owner_uid of a lease granted without authentication. The same value
/// as protocol::kAnonymousUid, and (uid_t)-1, which no account has.
constexpr uint32_t kAnonymousOwner = 0xffffffffu;

/// The owner as an optional: empty for kAnonymousOwner (quotas then count
/// against the client name).
inline std::optional<uint32_t> known_owner(uint32_t owner_uid) {
  if (owner_uid == kAnonymousOwner)
    return std::nullopt;
  return owner_uid;
}

/// "uid 1000, job 42", "uid 1000" or "anonymous", for logs.
inline std::string describe_owner(uint32_t owner_uid, const std::string &job_id) {
  if (owner_uid == kAnonymousOwner)
    return "anonymous";
  return "uid " + std::to_string(owner_uid) + (job_id.empty() ? "" : ", job " + job_id);
}

} // namespace rfaas::rm
