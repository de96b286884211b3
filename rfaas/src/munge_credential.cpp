// See munge_credential.hpp.
#include "munge_credential.hpp"

#include <munge.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

namespace rfaas::detail {

namespace proto = rfaas::protocol;

std::string attach_munge_credential(proto::LeaseRequest &request, bool *unreachable) {
  std::memset(request.credential, 0, sizeof request.credential);
  if (unreachable)
    *unreachable = false;
  std::vector<uint8_t> payload = proto::lease_request_binding(request);
  const char *job = std::getenv("SLURM_JOB_ID");
  if (job && *job)
    payload.insert(payload.end(), job, job + std::strlen(job));
  struct Free {
    void operator()(munge_ctx_t c) const { munge_ctx_destroy(c); }
  };
  std::unique_ptr<std::remove_pointer_t<munge_ctx_t>, Free> ctx(munge_ctx_create());
  if (!ctx)
    return "cannot create a MUNGE context";
  const char *socket = std::getenv("RFAAS_MUNGE_SOCKET");
  if (socket && *socket && munge_ctx_set(ctx.get(), MUNGE_OPT_SOCKET, socket) != EMUNGE_SUCCESS)
    return std::string("RFAAS_MUNGE_SOCKET: ") + munge_ctx_strerror(ctx.get());
  char *credential = nullptr;
  munge_err_t e =
      munge_encode(&credential, ctx.get(), payload.data(), static_cast<int>(payload.size()));
  std::unique_ptr<char, decltype(&std::free)> owned(credential, &std::free);
  if (e != EMUNGE_SUCCESS) {
    if (unreachable)
      *unreachable = e == EMUNGE_SOCKET;
    const char *why = munge_ctx_strerror(ctx.get());
    return why ? why : munge_strerror(e);
  }
  if (!proto::set_text(request.credential, credential))
    return "the MUNGE credential is longer than the request's " +
           std::to_string(proto::kCredentialCapacity - 1) + " bytes";
  return {};
}

} // namespace rfaas::detail
