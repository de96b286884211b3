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

bool parse_status(std::string_view text, Status &out) noexcept {
  for (Status s : {Status::Ok, Status::Again, Status::Timeout, Status::Closed, Status::Unsupported,
                   Status::InvalidArgument, Status::Cancelled, Status::Error}) {
    if (text == to_string(s)) {
      out = s;
      return true;
    }
  }
  return false;
}

const char *to_string(ErrorKind k) noexcept {
  switch (k) {
  case ErrorKind::Config:
    return "config";
  case ErrorKind::NotFound:
    return "not_found";
  case ErrorKind::Unsupported:
    return "unsupported";
  case ErrorKind::Timeout:
    return "timeout";
  case ErrorKind::Refused:
    return "refused";
  case ErrorKind::Closed:
    return "closed";
  case ErrorKind::Backend:
    break;
  }
  return "backend";
}

bool parse_error_kind(std::string_view text, ErrorKind &out) noexcept {
  for (ErrorKind k :
       {ErrorKind::Config, ErrorKind::NotFound, ErrorKind::Unsupported, ErrorKind::Timeout,
        ErrorKind::Refused, ErrorKind::Closed, ErrorKind::Backend}) {
    if (text == to_string(k)) {
      out = k;
      return true;
    }
  }
  return false;
}

} // namespace rdmalib
