// rdmalib's own logger ("rdmalib"), for rdmalib's sources only.
#pragma once

#include <rdmalib/logger.hpp>

namespace rdmalib {

inline spdlog::logger &logger() {
  static const std::shared_ptr<spdlog::logger> l = log::get("rdmalib");
  return *l;
}

} // namespace rdmalib
