// Plain file-descriptor I/O shared by the executor manager and the zygote,
// which talk over pipes.
#pragma once

#include <string>

namespace rfaas::server {

/// Writes all of `s` to `fd`, retrying short writes and EINTR. False on any
/// other error or when the fd is closed (EPIPE with SIGPIPE ignored); errno
/// then says why.
bool write_all(int fd, const std::string &s);

} // namespace rfaas::server
