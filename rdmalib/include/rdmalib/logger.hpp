// The spdlog logger of one rFaaS component, for code that links spdlog itself
// (rdmalib, librfaas, the servers, the tools). Applications use
// rdmalib/log.hpp or rfaas/log.hpp instead, which have no spdlog types.
#pragma once

#include <memory>

#include <spdlog/logger.h>

#include <rdmalib/log.hpp>

namespace rdmalib::log {

/// The logger called `name`, one of "rdmalib", "rfaas", "manager", "executor",
/// "resource_manager" (anything else throws std::invalid_argument), created on
/// first use with the shared sink and level described in rdmalib/log.hpp.
std::shared_ptr<spdlog::logger> get(const char *name);

} // namespace rdmalib::log
