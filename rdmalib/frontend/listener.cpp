// Listener and ConnectionRequest, once for every backend: the deadline and
// timeout error of next_request, the rules of answering a request (once;
// destroying it unanswered rejects it), moves and accessors.
#include <rdmalib/fabric.hpp>
#include <rdmalib/listener.hpp>

#include "backend.hpp"
#include "frontend/link.hpp"

namespace rdmalib {

// ---- ConnectionRequest ---------------------------------------------------------

void ConnectionRequest::Deleter::operator()(detail::RequestImpl *p) const noexcept {
  if (!p)
    return;
  if (!p->answered) {
    p->answered = true;
    p->reject();
  }
  delete p;
}

ConnectionRequest::ConnectionRequest() noexcept = default;
ConnectionRequest::~ConnectionRequest() = default;
ConnectionRequest::ConnectionRequest(ConnectionRequest &&) noexcept = default;
ConnectionRequest &ConnectionRequest::operator=(ConnectionRequest &&) noexcept = default;
ConnectionRequest::ConnectionRequest(detail::RequestImpl *impl) noexcept : impl_(impl) {}

const std::vector<uint8_t> &ConnectionRequest::private_data() const noexcept {
  static const std::vector<uint8_t> empty;
  return impl_ ? impl_->private_data : empty;
}

Address ConnectionRequest::remote_address() const noexcept {
  if (!impl_)
    return Address{};
  try {
    return impl_->remote_address();
  } catch (...) {
    return Address{};
  }
}

Connection ConnectionRequest::accept(const void *private_data, size_t private_len,
                                     std::chrono::milliseconds timeout,
                                     const ConnectionOptions &options) {
  if (!impl_)
    throw Error(ErrorKind::Config, "rdmalib: accept on an empty ConnectionRequest");
  if (impl_->answered)
    throw Error(ErrorKind::Config, "rdmalib: this connection request was already answered");
  Fabric &fabric = *impl_->fabric_handle;
  detail::check_private_data(fabric, private_data, private_len, "accept");
  // Answered from here on, whatever happens: a failed accept is not retried
  // on the same request.
  impl_->answered = true;
  detail::LinkPtr c = detail::new_link(fabric, options);
  c->peer_private = impl_->private_data;
  c->accept(*impl_, private_data, private_len, detail::Deadline(timeout));
  c->open = true;
  return Connection(c.release());
}

void ConnectionRequest::reject() noexcept {
  if (!impl_ || impl_->answered)
    return;
  impl_->answered = true;
  impl_->reject();
}

// ---- Listener --------------------------------------------------------------------

void Listener::Deleter::operator()(detail::ListenerImpl *p) const noexcept { delete p; }

Listener::Listener(Fabric &fabric, const Address &bind)
    : impl_(new detail::ListenerImpl(detail::Internals::fabric(fabric))) {
  impl_->fabric_handle = &fabric;
  impl_->listen(bind);
}

Listener::~Listener() = default;
Listener::Listener(Listener &&) noexcept = default;
Listener &Listener::operator=(Listener &&) noexcept = default;

const Address &Listener::address() const noexcept {
  static const Address none;
  return impl_ ? impl_->address : none;
}

int Listener::fd() const noexcept { return impl_ ? impl_->fd() : -1; }

ConnectionRequest Listener::next_request(std::chrono::milliseconds timeout) {
  if (!impl_)
    throw Error(ErrorKind::Config, "rdmalib: next_request on a moved-from Listener");
  detail::Deadline dl(timeout);
  detail::RequestImpl *r = impl_->next(dl);
  if (!r)
    throw Error(ErrorKind::Timeout, "rdmalib: no connection request on " +
                                        impl_->address.to_string() + " within " +
                                        std::to_string(timeout.count()) + " ms");
  return ConnectionRequest(r);
}

Connection Listener::accept(const void *private_data, size_t private_len,
                            std::chrono::milliseconds timeout, const ConnectionOptions &options) {
  detail::Deadline dl(timeout);
  ConnectionRequest req = next_request(timeout);
  auto left = dl.remaining();
  return req.accept(private_data, private_len,
                    left.count() > 0 ? left : std::chrono::milliseconds(1), options);
}

} // namespace rdmalib
