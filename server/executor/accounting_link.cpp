// The executor process's link to its manager (main thread): accounting
// increments by fetch_add on the manager's record where the fabric has
// atomics, as Accounting messages otherwise, and the goodbye.
#include "executor/executor.hpp"
#include "executor/process.hpp"

#include <stdexcept>

namespace rfaas::executor_process {

void AccountingLink::connect() {
  const server::LaunchSpec &spec = s_->spec;
  proto::ExecutorHello hello;
  hello.allocation_id = spec.allocation_id;
  hello.secret = spec.secret;
  open(spec.manager_host, spec.manager_port, spec.connect_ms, hello);
}

void AccountingLink::connect_pooled(const std::string &host, uint16_t port, uint32_t connect_ms,
                                    const proto::Token &secret) {
  proto::ExecutorHello hello;
  hello.allocation_id = proto::kPooledExecutor;
  hello.secret = secret;
  open(host, port, connect_ms, hello);
}

void AccountingLink::open(const std::string &host, uint16_t port, uint32_t connect_ms,
                          const proto::ExecutorHello &hello) {
  uint8_t bytes[sizeof hello];
  proto::encode(hello, bytes, sizeof bytes);
  rdmalib::ConnectionOptions opts = accounting_link_options();
  conn_ = rdmalib::Connection::connect(*fabric_, rdmalib::Address::from_host_text(host, port),
                                       bytes, sizeof bytes, milliseconds(connect_ms), opts);
  proto::ConnectReply reply;
  const auto &pd = conn_.peer_private_data();
  proto::WireResult r = proto::decode(pd.data(), pd.size(), reply);
  if (!r || reply.status != proto::ErrorCode::Ok)
    throw std::runtime_error("the manager refused the executor");
  results_ = rdmalib::Buffer<char>(*fabric_, 64, rdmalib::AccessLocal);
  conn_.attach(results_.region());
  ops_ = conn_.ops();
  proto::ControlOptions copts;
  copts.receives = kRecvs;
  copts.send_context = kSendCtx;
  ch_ = proto::ControlChannel(*fabric_, conn_, copts);
}

void AccountingLink::await_record() {
  if (!s_->fabric.capabilities().atomics)
    return;
  const server::LaunchSpec &spec = s_->spec;
  // The manager advertises its accounting record right after accepting.
  proto::BufferAdvertisement adv;
  proto::WireResult r;
  proto::ChannelStatus st = ch_.await(adv, Clock::now() + milliseconds(spec.connect_ms), &r);
  if (st == proto::ChannelStatus::BadMessage || st == proto::ChannelStatus::Unexpected)
    throw std::runtime_error("accounting record: " + proto::describe(r));
  if (st != proto::ChannelStatus::Ok)
    throw std::runtime_error(std::string("no accounting record from the manager: ") +
                             proto::to_string(st));
  record_ = adv.descriptor.buffer;
  have_record_ = true;
}

bool AccountingLink::flush(Clock::time_point start) {
  proto::AccountingCounters now;
  now.allocation_ns = ns_between(start, Clock::now());
  for (uint32_t i = 0; i < s_->request.cores; ++i) {
    now.hot_polling_ns += s_->counters[i].hot_ns.load(std::memory_order_relaxed);
    now.execution_ns += s_->counters[i].exec_ns.load(std::memory_order_relaxed);
    now.invocations += s_->counters[i].invocations.load(std::memory_order_relaxed);
  }
  uint64_t delta[4] = {now.allocation_ns - sent_.allocation_ns,
                       now.hot_polling_ns - sent_.hot_polling_ns,
                       now.execution_ns - sent_.execution_ns, now.invocations - sent_.invocations};
  sent_ = now;
  if (have_record_) {
    uint32_t posted = 0;
    for (int i = 0; i < 4; ++i) {
      if (delta[i] == 0)
        continue;
      rdmalib::LocalRef result = results_.local_bytes(8 * i, 8);
      if (ops_.fetch_add(result, record_, 8 * i, delta[i], i) != rdmalib::Status::Ok)
        return false;
      ++posted;
    }
    for (; posted > 0; --posted) {
      rdmalib::Completion c;
      if (wait_one(ops_, rdmalib::Queue::Send, c, 2000) != rdmalib::Status::Ok)
        return false;
    }
    return true;
  }
  proto::Accounting msg;
  msg.allocation_id = s_->spec.allocation_id;
  msg.worker = proto::kAllWorkers;
  msg.counters = {delta[0], delta[1], delta[2], delta[3]};
  return ch_.send(msg, Clock::now() + milliseconds(2000)) == proto::ChannelStatus::Ok;
}

bool AccountingLink::manager_left() {
  if (lease_ended_)
    return false; // the workers are stopping; what follows is the goodbye
  for (;;) {
    proto::ChannelStatus st = ch_.poll().status;
    if (st == proto::ChannelStatus::Shutdown &&
        ch_.goodbye().reason == proto::ErrorCode::LeaseInvalid) {
      lease_ended_ = true;
      s_->stop_reason.store(static_cast<uint16_t>(proto::ErrorCode::LeaseInvalid));
      s_->end_all();
      return false;
    }
    if (st == proto::ChannelStatus::Closed || st == proto::ChannelStatus::Shutdown)
      return true;
    if (st == proto::ChannelStatus::Timeout)
      return false; // nothing more now; other messages are ignored
  }
}

void AccountingLink::say_goodbye(proto::ErrorCode reason) {
  proto::Shutdown bye;
  bye.allocation_id = s_->spec.allocation_id;
  bye.reason = reason;
  ch_.send(bye, Clock::now() + milliseconds(1000));
}

} // namespace rfaas::executor_process
