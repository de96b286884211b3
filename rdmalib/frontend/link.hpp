// Helpers the front end's connection setup shares between Connection
// (active side) and ConnectionRequest (passive side).
#pragma once

#include <memory>
#include <string>

#include "backend.hpp"

namespace rdmalib::detail {

/// A link being set up; closed and freed if setup throws.
using LinkPtr = std::unique_ptr<ConnectionImpl, Internals::LinkDeleter>;

/// A new link of `fabric` with the options' defaults filled in (0 depths:
/// the device's default_receive_buffer_size and 64) and its stashes sized.
LinkPtr new_link(Fabric &fabric, const ConnectionOptions &options);
/// `o` with the defaults a new link applies (depths from the device entry).
ConnectionOptions with_defaults(const FabricImpl &f, ConnectionOptions o);

/// Throws Error(Config) naming `what` when `len` bytes of private data exceed
/// Capabilities::max_private_data, or when they are at a null address.
void check_private_data(const Fabric &fabric, const void *data, size_t len,
                        const std::string &what);

} // namespace rdmalib::detail
