// librfaas's own logger ("rfaas"), for librfaas's sources only.
#pragma once

#include <rdmalib/logger.hpp>

namespace rfaas {

inline spdlog::logger &logger() {
  static const std::shared_ptr<spdlog::logger> l = rdmalib::log::get("rfaas");
  return *l;
}

} // namespace rfaas
