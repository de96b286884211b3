// Plain file-descriptor I/O shared by the executor manager and the zygote,
// which talk over pipes.
#pragma once

#include <string>

namespace rfaas::server {

/// Writes all of `s` to `fd`, retrying short writes and EINTR. False on any
/// other error or when the fd is closed (EPIPE with SIGPIPE ignored); errno
/// then says why.
bool write_all(int fd, const std::string &s);

/// Reads `fd` until end of file (retrying EINTR), closes it and returns what
/// was read; a read error ends it like end of file.
std::string read_to_end_and_close(int fd);

} // namespace rfaas::server
