// The MUNGE credential librfaas attaches to a lease request: the client's
// identity as this host's munged vouches for it, bound to the request.
#pragma once

#include <string>

#include "protocol/rm_messages.hpp"

namespace rfaas::detail {

/// Fills `request.credential` with a credential from munged (socket:
/// RFAAS_MUNGE_SOCKET, else libmunge's default) whose payload is
/// lease_request_binding(request) followed by SLURM_JOB_ID (if set). Returns
/// an empty string on success; otherwise why not (munged unreachable, ...),
/// with the credential left empty: the resource manager then decides.
/// `*unreachable` (when given) is set when munged could not be reached at
/// all, as opposed to refusing: a caller may then skip asking for a while.
std::string attach_munge_credential(protocol::LeaseRequest &request, bool *unreachable = nullptr);

} // namespace rfaas::detail
