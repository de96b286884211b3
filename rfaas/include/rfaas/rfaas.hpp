// Umbrella header of librfaas, the rFaaS client library. Link rfaas::rfaas
// (CMake) or `pkg-config --cflags --libs rfaas`. See docs/client.md.
#pragma once

#include <rfaas/allocator.hpp>
#include <rfaas/buffer.hpp>
#include <rfaas/devices.hpp>
#include <rfaas/errors.hpp>
#include <rfaas/executor.hpp>
#include <rfaas/log.hpp>
#include <rfaas/resource_manager.hpp>
#include <rfaas/servers.hpp>
