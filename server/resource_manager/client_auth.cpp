// The MUNGE check of lease requests. See client_auth.hpp.
#include "resource_manager/client_auth.hpp"

#include <munge.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "protocol/rm_messages.hpp"

namespace rfaas::rm {

namespace proto = rfaas::protocol;
static_assert(kAnonymousOwner == proto::kAnonymousUid,
              "one value for an anonymous owner, on the wire and in the store");

namespace {

struct ContextDeleter {
  void operator()(munge_ctx_t c) const { munge_ctx_destroy(c); }
};
using Context = std::unique_ptr<std::remove_pointer_t<munge_ctx_t>, ContextDeleter>;

struct PayloadDeleter {
  void operator()(void *p) const { std::free(p); }
};

/// What the client reads when its credential is refused: the cause first,
/// then what to do about it.
std::string refusal(munge_err_t e, munge_ctx_t ctx) {
  switch (e) {
  case EMUNGE_CRED_EXPIRED:
    return "expired MUNGE credential (past its time to live; are both hosts' clocks right?)";
  case EMUNGE_CRED_REWOUND:
    return "MUNGE credential from the future (the client's clock is ahead)";
  case EMUNGE_CRED_REPLAYED:
    return "replayed MUNGE credential (each credential is good for one request)";
  case EMUNGE_CRED_INVALID:
  case EMUNGE_BAD_REALM:
    return "MUNGE credential from another realm (a munged with another key made it)";
  case EMUNGE_BAD_CRED:
  case EMUNGE_BAD_VERSION:
  case EMUNGE_BAD_CIPHER:
  case EMUNGE_BAD_MAC:
  case EMUNGE_BAD_ZIP:
    return std::string("malformed MUNGE credential (") + munge_strerror(e) + ")";
  case EMUNGE_CRED_UNAUTHORIZED:
    return "MUNGE credential restricted to another uid or gid";
  case EMUNGE_SOCKET: {
    const char *text = ctx ? munge_ctx_strerror(ctx) : nullptr;
    return std::string("the resource manager cannot reach munged (") +
           (text ? text : munge_strerror(e)) + ")";
  }
  default: {
    const char *text = ctx ? munge_ctx_strerror(ctx) : nullptr;
    return std::string("MUNGE credential refused (") + (text ? text : munge_strerror(e)) + ")";
  }
  }
}

/// A SLURM job id as SLURM_JOB_ID spells it (digits; array and
/// heterogeneous jobs add '_' or '+'): nothing that a CSV or a log could
/// read as more than a name.
bool plausible_job_id(const std::string &s) {
  if (s.size() >= proto::kNameCapacity)
    return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
          c == '+' || c == '.' || c == '-'))
      return false;
  return true;
}

} // namespace

ClientAuth::ClientAuth(ClientAuthMode mode, std::string munge_socket)
    : mode_(mode), socket_(std::move(munge_socket)) {}

std::string ClientAuth::describe() const {
  if (mode_ == ClientAuthMode::None)
    return "auth none: clients are anonymous (any process that reaches the fabric port may lease "
           "as any name; executors run as each node's executor.user)";
  return "auth munge: every lease request needs a MUNGE credential of this realm (munged socket " +
         (socket_.empty() ? std::string("/run/munge/munge.socket.2 (libmunge's default)")
                          : socket_) +
         "); leases record the client's uid and SLURM job id";
}

bool ClientAuth::verify(const proto::LeaseRequest &request, ClientIdentity &who,
                        std::string &why) const {
  who = ClientIdentity{};
  if (mode_ == ClientAuthMode::None)
    return true;
  const std::string credential(proto::get_text(request.credential));
  if (credential.empty()) {
    why = "missing MUNGE credential (auth munge; is munged running on the client's host, or "
          "RFAAS_MUNGE_SOCKET set?)";
    return false;
  }
  Context ctx(munge_ctx_create());
  if (!ctx) {
    why = "the resource manager cannot create a MUNGE context (out of memory)";
    return false;
  }
  if (!socket_.empty() && munge_ctx_set(ctx.get(), MUNGE_OPT_SOCKET, socket_.c_str()) != 0) {
    why = refusal(EMUNGE_BAD_ARG, ctx.get());
    return false;
  }
  void *raw = nullptr;
  int length = 0;
  uid_t uid = static_cast<uid_t>(-1);
  gid_t gid = static_cast<gid_t>(-1);
  munge_err_t e = munge_decode(credential.c_str(), ctx.get(), &raw, &length, &uid, &gid);
  // libmunge hands back the payload also for some refusals (expired, replayed).
  std::unique_ptr<void, PayloadDeleter> payload(raw);
  if (e != EMUNGE_SUCCESS) {
    why = refusal(e, ctx.get());
    return false;
  }
  const std::vector<uint8_t> binding = proto::lease_request_binding(request);
  const auto *bytes = static_cast<const uint8_t *>(payload.get());
  if (length < 0 || static_cast<size_t>(length) < binding.size() || !bytes ||
      std::memcmp(bytes, binding.data(), binding.size()) != 0) {
    why = "MUNGE credential made for another request";
    return false;
  }
  std::string job(reinterpret_cast<const char *>(bytes) + binding.size(),
                  static_cast<size_t>(length) - binding.size());
  if (!plausible_job_id(job)) {
    why = "MUNGE credential with an unreadable SLURM job id";
    return false;
  }
  if (uid == static_cast<uid_t>(-1)) {
    why = "MUNGE credential without a uid";
    return false;
  }
  who.owner_uid = static_cast<uint32_t>(uid);
  who.owner_gid = static_cast<uint32_t>(gid);
  who.job_id = std::move(job);
  return true;
}

} // namespace rfaas::rm
