#include <rdmalib/errors.hpp>

namespace rdmalib {

const char *to_string(Status s) noexcept {
  switch (s) {
  case Status::Ok:
    return "ok";
  case Status::Again:
    return "again";
  case Status::Timeout:
    return "timeout";
  case Status::Closed:
    return "closed";
  case Status::Unsupported:
    return "unsupported";
  case Status::InvalidArgument:
    return "invalid_argument";
  case Status::Cancelled:
    return "cancelled";
  case Status::Error:
    return "error";
  }
  return "unknown";
}

} // namespace rdmalib
