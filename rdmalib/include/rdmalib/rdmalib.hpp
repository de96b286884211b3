// Umbrella header: everything an upper layer needs from rdmalib.
//
// rdmalib is the network layer of rFaaS. The backend (libfabric or verbs) is
// chosen when the project is configured; nothing in these headers depends on
// it, so code above rdmalib is written once. See docs/rdmalib.md.
#pragma once

#include <rdmalib/address.hpp>
#include <rdmalib/buffer.hpp>
#include <rdmalib/capabilities.hpp>
#include <rdmalib/connection.hpp>
#include <rdmalib/device.hpp>
#include <rdmalib/errors.hpp>
#include <rdmalib/fabric.hpp>
#include <rdmalib/listener.hpp>
#include <rdmalib/operations.hpp>
