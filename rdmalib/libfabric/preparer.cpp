// Fabric::prepare on the libfabric backend: per-connection endpoints opened
// ahead of need where opening one is slow (Quirks::endpoint_open_is_slow).
#include "backend.hpp"
#include "common/logging.hpp"

namespace rdmalib::lf {

Preparer::~Preparer() {
  {
    std::lock_guard<std::mutex> g(m_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable())
    thread_.join();
  kinds_.clear();
}

bool Preparer::want(uint32_t recv_depth, uint32_t send_depth, Fabric::Refill refill) {
  std::lock_guard<std::mutex> g(m_);
  for (const Kind &k : kinds_)
    if (k.recv_depth == recv_depth && k.send_depth == send_depth)
      return true;
  if (kinds_.size() >= kMaxKinds)
    return false;
  Kind k;
  k.recv_depth = recv_depth;
  k.send_depth = send_depth;
  k.refill = refill;
  kinds_.push_back(std::move(k));
  if (!thread_.joinable())
    thread_ = std::thread([this] { run(); });
  cv_.notify_all();
  return true;
}

std::unique_ptr<detail::ConnectionImpl> Preparer::take(uint32_t recv_depth, uint32_t send_depth) {
  std::unique_lock<std::mutex> g(m_);
  auto find = [&]() -> Kind * {
    for (Kind &k : kinds_)
      if (k.recv_depth == recv_depth && k.send_depth == send_depth)
        return &k;
    return nullptr;
  };
  // The kinds may move while the lock is released (want() appends): look
  // the kind up again after waiting.
  cv_.wait(g, [&] {
    Kind *k = find();
    return stop_ || !k || !k->opening;
  });
  Kind *k = find();
  if (!k || !k->ready)
    return nullptr;
  ++taken_;
  k->taken_at = std::chrono::steady_clock::now();
  k->done = k->refill == Fabric::Refill::Once;
  cv_.notify_all();
  return std::move(k->ready);
}

Fabric::PreparedEndpoints Preparer::counts() const {
  std::lock_guard<std::mutex> g(m_);
  Fabric::PreparedEndpoints c;
  for (const Kind &k : kinds_)
    c.waiting += k.ready != nullptr;
  c.taken = taken_;
  return c;
}

void Preparer::run() {
  std::unique_lock<std::mutex> g(m_);
  for (;;) {
    uint32_t recv_depth = 0, send_depth = 0;
    // The earliest refill that is not due yet, if any.
    auto next_due = std::chrono::steady_clock::time_point::max();
    auto pick = [&] {
      if (stop_)
        return true;
      const auto now = std::chrono::steady_clock::now();
      next_due = std::chrono::steady_clock::time_point::max();
      for (Kind &k : kinds_) {
        if (k.ready || k.failed || k.done)
          continue;
        const auto due = k.taken_at + std::chrono::milliseconds(Fabric::kRefillQuietMs);
        if (k.taken_at != std::chrono::steady_clock::time_point{} && due > now) {
          next_due = std::min(next_due, due);
          continue;
        }
        recv_depth = k.recv_depth;
        send_depth = k.send_depth;
        k.opening = true;
        return true;
      }
      return false;
    };
    while (!pick()) {
      if (next_due == std::chrono::steady_clock::time_point::max())
        cv_.wait(g);
      else
        cv_.wait_until(g, next_due);
    }
    if (stop_)
      return;
    g.unlock();
    // Opened outside the lock: this is the slow part, and a connect that
    // finds nothing waiting must not wait for it.
    std::unique_ptr<detail::ConnectionImpl> c;
    std::string error;
    try {
      c = std::make_unique<detail::ConnectionImpl>(f_);
      c->options.recv_depth = recv_depth;
      c->options.send_depth = send_depth;
      c->open_queues(false);
      InfoPtr info = f_.endpoint_info(nullptr);
      c->create_endpoint(info.get());
    } catch (const std::exception &e) {
      c.reset();
      error = e.what();
    }
    g.lock();
    for (Kind &k : kinds_)
      if (k.recv_depth == recv_depth && k.send_depth == send_depth) {
        k.opening = false;
        if (c)
          k.ready = std::move(c);
        else
          k.failed = true;
      }
    cv_.notify_all(); // a take() may wait for this one
    if (!error.empty())
      rdmalib::logger().warn("rdmalib: cannot open an endpoint ahead of need on {} ({}); "
                             "connections with {} receives and {} sends open their own",
                             f_.provider, error, recv_depth, send_depth);
  }
}

} // namespace rdmalib::lf

namespace rdmalib::detail {

bool FabricImpl::prepare(const ConnectionOptions &options, Fabric::Refill refill) {
  if (!preparer)
    return false;
  return preparer->want(options.recv_depth, options.send_depth, refill);
}

Fabric::PreparedEndpoints FabricImpl::prepared() const {
  return preparer ? preparer->counts() : Fabric::PreparedEndpoints{};
}

bool ConnectionImpl::adopt_prepared() {
  if (!fab->preparer)
    return false;
  std::unique_ptr<ConnectionImpl> p = fab->preparer->take(options.recv_depth, options.send_depth);
  if (!p)
    return false;
  slots = std::move(p->slots);
  tx_slots = p->tx_slots;
  tx_free = p->tx_free;
  rx_free = p->rx_free;
  pending = std::move(p->pending);
  waitset = std::move(p->waitset);
  eq = std::move(p->eq);
  txcq = std::move(p->txcq);
  rxcq = std::move(p->rxcq);
  av = std::move(p->av);
  ctl_mem = std::move(p->ctl_mem);
  ctl_mr = std::move(p->ctl_mr);
  ep = std::move(p->ep);
  local_name.swap(p->local_name);
  return true;
}

} // namespace rdmalib::detail
