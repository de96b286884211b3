// The listener's doorbell: a wait fd for listeners of node-local providers
// whose queues have none (shm), so a daemon sleeps in poll() until a
// connection request arrives instead of waking every few milliseconds.
#pragma once

#include <cstddef>

namespace rdmalib::lf {

/// An abstract-namespace UNIX datagram socket named after the listening
/// endpoint's raw name (`name`, `len` bytes), non-blocking and close-on-exec;
/// -1 when it cannot be created (the listener then has no fd, as before).
int open_doorbell(const void *name, size_t len) noexcept;

/// Tell the listener whose endpoint is named `name` that a HELLO was sent to
/// it. Best effort: a listener without a doorbell, or one in another network
/// namespace (abstract names are per namespace), is found by its owner's
/// periodic look instead.
void ring_doorbell(const void *name, size_t len) noexcept;

/// Empty the doorbell so that it becomes readable again only for requests
/// sent after this call.
void drain_doorbell(int fd) noexcept;

} // namespace rdmalib::lf
