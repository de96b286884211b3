// The libfabric endpoint of the raw baselines (raw_libfabric_pingpong and
// raw_libfabric_msgrate): everything a careful direct user of libfabric does
// to reach a peer, with no rdmalib in between. Like the programs, this file
// includes libfabric headers, which DESIGN.md §2 allows only in raw baselines
// (its name contains "raw").
//
// One endpoint, separate transmit and receive completion queues, one memory
// registration covering all buffers ([send | receive slots | RMA target]),
// receives pre-posted in every slot, no allocation and no logging on the data
// path. Busy-polled completion queues have no wait object (FI_WAIT_NONE), the
// fastest setup found here for spinning (docs/BACKEND-BUGS.md).
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "pingpong_loop.hpp"

namespace raw {

using namespace pingpong;

/// The API version we ask for: the headers we build against. Diagnostic knob:
/// RAW_PINGPONG_API=MAJOR.MINOR asks for another one.
inline uint32_t api_version() {
  static const uint32_t v = [] {
    const char *a = std::getenv("RAW_PINGPONG_API");
    unsigned major = 0, minor = 0;
    if (a && std::sscanf(a, "%u.%u", &major, &minor) == 2)
      return static_cast<uint32_t>(FI_VERSION(major, minor));
    return static_cast<uint32_t>(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION));
  }();
  return v;
}
/// The libfabric library loaded at run time, as MAJOR.MINOR.
inline std::string libfabric_version() {
  return std::to_string(FI_MAJOR(fi_version())) + "." + std::to_string(FI_MINOR(fi_version()));
}

constexpr size_t kCqBatch = 8;

[[noreturn]] inline void fi_die(const char *call, int ret) {
  die("%s failed: %s (%d)", call, fi_strerror(-ret), ret);
}

inline void fi_check(const char *call, int ret) {
  if (ret)
    fi_die(call, ret);
}

/// Aliases users type for the RDM layering over tcp.
inline std::string canonical_provider(const std::string &p) {
  if (p == "rxm" || p == "tcp-rdm" || p == "ofi_rxm")
    return "tcp;ofi_rxm";
  return p;
}

/// Provider quirk (libfabric 1.17, measured here, DESIGN.md §3): `sockets`
/// progresses every endpoint from its own thread. A process spinning on the CQ
/// on a 2-core machine starves that thread (milliseconds per message), while
/// blocking CQ reads give ~28 us one way. So on sockets we sleep in
/// fi_cq_sread instead of spinning, unless the user asked otherwise.
inline bool provider_needs_blocking_waits(const std::string &provider) {
  return provider == "sockets";
}

inline void close_fid(fid_t f, const char *what) {
  if (!f)
    return;
  int ret = fi_close(f);
  if (ret)
    std::fprintf(stderr, "[%s] warning: fi_close(%s): %s\n", side_name(), what, fi_strerror(-ret));
}

/// What the peer needs to reach our memory, sent out of band.
struct RemoteInfo {
  uint64_t base = 0; // address of region offset 0 in remote operations
  uint64_t key = 0;
};

/// All libfabric state of one side.
class RawEndpoint {
public:
  /// Most receive slots (and so most outstanding operations of a window).
  static constexpr int kMaxRxSlots = 64;

  /// `rx_slots` receives stay posted: 2 for a ping-pong (the one consumed and
  /// the next), the window for a message-rate run on a provider where remote
  /// CQ data consumes a receive.
  RawEndpoint(const Options &o, bool server, int rx_slots = 2)
      : o_(o), server_(server), rx_slots_(rx_slots) {
    if (rx_slots_ < 1 || rx_slots_ > kMaxRxSlots)
      die("receive slots must be 1..%d, not %d", kMaxRxSlots, rx_slots_);
    provider_ = canonical_provider(o.provider);
    slot_bytes_ = std::max<size_t>(max_size(o), 64); // same layout as rdmalib_pingpong
    // Region layout: [send | recv slot 0 .. rx_slots-1 | RMA target].
    region_bytes_ = (2 + static_cast<size_t>(rx_slots_)) * slot_bytes_;
    region_bytes_ = (region_bytes_ + 4095) / 4096 * 4096;
    region_ = static_cast<char *>(std::aligned_alloc(4096, region_bytes_));
    if (!region_)
      die("cannot allocate %zu bytes", region_bytes_);
    std::memset(region_, server ? kServerFill : kClientFill, region_bytes_);
  }

  ~RawEndpoint() {
    close_fid(ep_ ? &ep_->fid : nullptr, "endpoint");
    close_fid(mr_ ? &mr_->fid : nullptr, "memory region");
    close_fid(txcq_ ? &txcq_->fid : nullptr, "tx cq");
    close_fid(rxcq_ ? &rxcq_->fid : nullptr, "rx cq");
    close_fid(av_ ? &av_->fid : nullptr, "address vector");
    close_fid(pep_ ? &pep_->fid : nullptr, "passive endpoint");
    close_fid(eq_ ? &eq_->fid : nullptr, "event queue");
    close_fid(domain_ ? &domain_->fid : nullptr, "domain");
    close_fid(fabric_ ? &fabric_->fid : nullptr, "fabric");
    if (conn_info_)
      fi_freeinfo(conn_info_);
    if (info_)
      fi_freeinfo(info_);
    std::free(region_);
  }

  /// Set up the endpoint and connect to the peer through the OOB channel.
  void establish(Oob &oob) {
    WaitPolicy w = o_.wait;
    if (w == WaitPolicy::Auto)
      w = provider_needs_blocking_waits(provider_) ? WaitPolicy::Block : WaitPolicy::Busy;
    block_ = (w == WaitPolicy::Block);

    if (o_.endpoint == "msg" || o_.endpoint == "auto") {
      info_ = query(FI_EP_MSG);
      if (!info_ && o_.endpoint == "msg")
        die("provider \"%s\" offers no FI_EP_MSG endpoint with FI_MSG|FI_RMA here (try --endpoint "
            "rdm)",
            provider_.c_str());
    }
    if (!info_) {
      info_ = query(FI_EP_RDM);
      if (!info_)
        die("provider \"%s\" offers no %s endpoint with FI_MSG|FI_RMA here (fi_info -l lists "
            "providers)",
            provider_.c_str(), o_.endpoint == "rdm" ? "FI_EP_RDM" : "MSG or RDM");
    }
    rdm_ = info_->ep_attr->type == FI_EP_RDM;
    if (rdm_)
      establish_rdm(oob);
    else if (server_)
      establish_msg_server(oob);
    else
      establish_msg_client(oob);

    // Exchange what each side needs to write into the other.
    RemoteInfo mine{(info_mr_mode() & FI_MR_VIRT_ADDR) ? reinterpret_cast<uint64_t>(region_) : 0,
                    fi_mr_key(mr_)};
    oob.send_value(mine);
    peer_ = oob.recv_value<RemoteInfo>("the peer's memory key");
  }

  std::string provider_name() const { return info_->fabric_attr->prov_name; }
  const char *endpoint_name() const { return rdm_ ? "rdm" : "msg"; }
  const char *wait_policy() const { return block_ ? "block" : "busy"; }
  bool consumes_receive() const { return (info_->mode & FI_RX_CQ_DATA) != 0; }

  // ---- data path -----------------------------------------------------------------

  char *send_buf() { return region_; }
  char *slot_buf(int slot) { return region_ + (1 + slot) * slot_bytes_; }
  char *target_buf() { return region_ + (1 + rx_slots_) * slot_bytes_; }
  int rx_slots() const { return rx_slots_; }

  void post_recv(int slot) {
    for (;;) {
      ssize_t ret =
          fi_recv(ep_, slot_buf(slot), slot_bytes_, desc_, FI_ADDR_UNSPEC, &recv_ctx_[slot]);
      if (ret == 0)
        return;
      if (ret != -FI_EAGAIN)
        fi_die("fi_recv", static_cast<int>(ret));
      progress();
      watchdog().what = "a free receive slot";
      spin_check();
    }
  }

  void post_send(size_t size) { post_send_from(send_buf(), size, &send_ctx_); }

  /// Send with the caller's context: an operation of a window, where each
  /// outstanding one needs its own (FI_CONTEXT).
  void post_send(size_t size, fi_context *ctx) { post_send_from(send_buf(), size, ctx); }

  /// Send `size` bytes from `src`, which must lie in our registered region
  /// (an echo replies from the receive slot it was given).
  void post_send_from(const char *src, size_t size) { post_send_from(src, size, &send_ctx_); }

  void post_send_from(const char *src, size_t size, fi_context *ctx) {
    post_until_taken("fi_send", [&] { return fi_send(ep_, src, size, desc_, peer_addr_, ctx); });
  }

  void post_writedata(size_t size, uint64_t imm) {
    post_writedata_from(send_buf(), size, imm, &write_ctx_);
  }

  /// Write-with-data with the caller's context (see post_send).
  void post_writedata(size_t size, uint64_t imm, fi_context *ctx) {
    post_writedata_from(send_buf(), size, imm, ctx);
  }

  /// Write-with-data of `size` bytes from `src` (in our registered region)
  /// into the peer's RMA target.
  void post_writedata_from(const char *src, size_t size, uint64_t imm) {
    post_writedata_from(src, size, imm, &write_ctx_);
  }

  void post_writedata_from(const char *src, size_t size, uint64_t imm, fi_context *ctx) {
    uint64_t dst = peer_.base + (1 + static_cast<uint64_t>(rx_slots_)) * slot_bytes_;
    post_until_taken("fi_writedata", [&] {
      return fi_writedata(ep_, src, size, desc_, imm, peer_addr_, dst, peer_.key, ctx);
    });
  }

  /// Wait for the next receive-side event (message or remote write).
  RxEvent wait_rx(const char *what) {
    watchdog().what = what;
    while (rx_head_ == rx_tail_) {
      // Blocking reads time out every 100 ms to look at the deadline.
      if (read_cq(rxcq_, true, block_ ? 100 : 0) == 0 && block_)
        watchdog().check();
      // Busy polling reaps a transmit's completion while it waits for the
      // reply: reaped after the reply, it was one more progress pass on the
      // round trip (tcp: ~0.5-1 us of system calls; shm ~0.05-0.1 us).
      if (!block_ && rx_head_ == rx_tail_ && tx_done_ < tx_posted_)
        read_cq(txcq_, false, 0);
      spin_check();
    }
    return rxq_[rx_head_++ % kRxQueue];
  }

  /// Wait until every posted transmit has completed.
  void wait_tx(const char *what) {
    watchdog().what = what;
    while (tx_done_ < tx_posted_) {
      // Blocking reads time out every 100 ms to look at the deadline.
      if (read_cq(txcq_, false, block_ ? 100 : 0) == 0 && block_)
        watchdog().check();
      spin_check();
    }
  }

  /// Windows of operations: what the retry loop of a post read meanwhile
  /// first, then one non-blocking read of the receive CQ; `f(const RxEvent &)`
  /// sees each event (the caller reposts a consumed slot). Returns the count.
  template <class F> size_t drain_rx(F &&f) {
    size_t seen = 0;
    while (rx_head_ != rx_tail_) {
      f(rxq_[rx_head_++ % kRxQueue]);
      ++seen;
    }
    fi_cq_data_entry e[kCqBatch];
    ssize_t n = fi_cq_read(rxcq_, e, kCqBatch);
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i)
        f(make_event(e[i]));
      return seen + static_cast<size_t>(n);
    }
    if (n != -FI_EAGAIN)
      cq_failed(rxcq_, true, n);
    return seen;
  }

  /// The same for the transmit CQ: `f(void *context)` gets back the context
  /// of each completed operation. Needs track_tx_contexts().
  template <class F> size_t drain_tx(F &&f) {
    size_t seen = 0;
    while (txq_head_ != txq_tail_) {
      f(txq_[txq_head_++ % kTxQueue]);
      ++seen;
    }
    fi_cq_data_entry e[kCqBatch];
    ssize_t n = fi_cq_read(txcq_, e, kCqBatch);
    if (n > 0) {
      tx_done_ += static_cast<uint64_t>(n);
      for (ssize_t i = 0; i < n; ++i)
        f(e[i].op_context);
      return seen + static_cast<size_t>(n);
    }
    if (n != -FI_EAGAIN)
      cq_failed(txcq_, false, n);
    return seen;
  }

  /// Keep the contexts of transmit completions that a post's retry loop
  /// reaps, for drain_tx (a window's contexts go back to their pool).
  void track_tx_contexts() { track_tx_ = true; }
  uint64_t tx_outstanding() const { return tx_posted_ - tx_done_; }

private:
  // Events a post's retry loop read: at most a window's worth (kMaxRxSlots).
  static constexpr unsigned kRxQueue = 2 * kMaxRxSlots;
  static constexpr unsigned kTxQueue = 2 * kMaxRxSlots;

  uint64_t info_mr_mode() const { return info_->domain_attr->mr_mode; }

  /// One thread drives each endpoint, so FI_THREAD_DOMAIN is enough.
  /// Diagnostic knob: RAW_PINGPONG_THREADING=domain|safe|completion.
  static fi_threading threading_hint() {
    const char *t = std::getenv("RAW_PINGPONG_THREADING");
    if (!t || std::string(t) == "domain")
      return FI_THREAD_DOMAIN;
    if (std::string(t) == "safe")
      return FI_THREAD_SAFE;
    if (std::string(t) == "completion")
      return FI_THREAD_COMPLETION;
    die("RAW_PINGPONG_THREADING must be domain, safe or completion, not '%s'", t);
  }

  /// Hints for the provider and endpoint type asked for. Caller frees.
  fi_info *make_hints(fi_ep_type type) const {
    fi_info *hints = fi_allocinfo();
    if (!hints)
      die("fi_allocinfo: out of memory");
    hints->caps = FI_MSG | FI_RMA;
    // We pass a struct fi_context with every operation and cope with remote CQ
    // data consuming a receive, so offer both modes.
    hints->mode = FI_CONTEXT | FI_RX_CQ_DATA;
    hints->ep_attr->type = type;
    // Offer every memory registration mode we handle; honour what the provider keeps.
    hints->domain_attr->mr_mode =
        FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->domain_attr->threading = threading_hint();
    hints->fabric_attr->prov_name = ::strdup(provider_.c_str());
    return hints;
  }

  /// The provider's endpoint of `type`, bound to our loopback host where the
  /// provider has IP addresses; null when the provider has no such endpoint.
  /// (The MSG client asks again in establish_msg_client, with the server's
  /// address; here it only learns whether MSG is available.)
  fi_info *query(fi_ep_type type) {
    fi_info *hints = make_hints(type);
    fi_info *out = nullptr;
    int ret = fi_getinfo(api_version(), nullptr, nullptr, 0, hints, &out);
    // Providers with IP addresses (tcp, sockets, rxm) bind to the loopback
    // host, on an ephemeral port. Others keep the source name they chose:
    // shm would take the host string itself as its name, and two processes
    // with the same shm name collide (fi_enable: EBUSY).
    bool ip = ret == 0 && (out->addr_format == FI_SOCKADDR_IN ||
                           out->addr_format == FI_SOCKADDR_IN6 || out->addr_format == FI_SOCKADDR);
    if (ip && !(type == FI_EP_MSG && !server_)) {
      fi_freeinfo(out);
      out = nullptr;
      ret = fi_getinfo(api_version(), o_.host.c_str(), "0", FI_SOURCE, hints, &out);
    }
    fi_freeinfo(hints);
    if (ret == -FI_ENODATA)
      return nullptr;
    if (ret)
      fi_die("fi_getinfo", ret);
    return out;
  }

  void open_cqs(fid_domain *domain) {
    fi_cq_attr attr{};
    attr.size = 128;
    attr.format = FI_CQ_FORMAT_DATA;
    attr.wait_obj = block_ ? FI_WAIT_UNSPEC : FI_WAIT_NONE;
    // Diagnostic knob: RAW_PINGPONG_CQ_WAIT=none|unspec|fd forces the CQs' wait
    // object, to measure what a wait object costs a busy-polling loop.
    if (const char *w = std::getenv("RAW_PINGPONG_CQ_WAIT")) {
      std::string v = w;
      if (v == "none")
        attr.wait_obj = FI_WAIT_NONE;
      else if (v == "unspec")
        attr.wait_obj = FI_WAIT_UNSPEC;
      else if (v == "fd")
        attr.wait_obj = FI_WAIT_FD;
      else
        die("RAW_PINGPONG_CQ_WAIT must be none, unspec or fd, not '%s'", w);
      if (block_ && attr.wait_obj == FI_WAIT_NONE)
        die("--wait block needs a CQ wait object (RAW_PINGPONG_CQ_WAIT=none conflicts)");
    }
    fi_check("fi_cq_open(tx)", fi_cq_open(domain, &attr, &txcq_, nullptr));
    fi_check("fi_cq_open(rx)", fi_cq_open(domain, &attr, &rxcq_, nullptr));
  }

  void register_memory(const fi_info *info) {
    uint64_t mode = info->domain_attr->mr_mode;
    // Without FI_MR_PROV_KEY the application picks keys, unique per domain;
    // one registration per process, so any constant will do.
    uint64_t key = (mode & FI_MR_PROV_KEY) ? 0 : (server_ ? 0x5e12 : 0xc11e);
    uint64_t access = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    fi_check("fi_mr_reg",
             fi_mr_reg(domain_, region_, region_bytes_, access, 0, key, 0, &mr_, nullptr));
    if (mode & FI_MR_ENDPOINT) {
      fi_check("fi_mr_bind", fi_mr_bind(mr_, &ep_->fid, 0));
      fi_check("fi_mr_enable", fi_mr_enable(mr_));
    }
    desc_ = fi_mr_desc(mr_);
  }

  void open_endpoint(fi_info *info) {
    fi_check("fi_endpoint", fi_endpoint(domain_, info, &ep_, nullptr));
    if (eq_)
      fi_check("fi_ep_bind(eq)", fi_ep_bind(ep_, &eq_->fid, 0));
    if (av_)
      fi_check("fi_ep_bind(av)", fi_ep_bind(ep_, &av_->fid, 0));
    fi_check("fi_ep_bind(tx cq)", fi_ep_bind(ep_, &txcq_->fid, FI_TRANSMIT));
    fi_check("fi_ep_bind(rx cq)", fi_ep_bind(ep_, &rxcq_->fid, FI_RECV));
    fi_check("fi_enable", fi_enable(ep_));
    register_memory(info);
    for (int slot = 0; slot < rx_slots_; ++slot)
      post_recv(slot);
  }

  void open_eq() {
    fi_eq_attr attr{};
    attr.size = 16;
    attr.wait_obj = FI_WAIT_UNSPEC;
    fi_check("fi_eq_open", fi_eq_open(fabric_, &attr, &eq_, nullptr));
  }

  /// Wait for a CM event; both sides must read their EQ for tcp to progress.
  uint32_t wait_cm_event(fi_eq_cm_entry *entry, size_t entry_bytes, const char *what) {
    watchdog().what = what;
    for (;;) {
      uint32_t event = 0;
      ssize_t ret = fi_eq_sread(eq_, &event, entry, entry_bytes, 10, 0);
      if (ret > 0)
        return event;
      if (ret == -FI_EAVAIL) {
        fi_eq_err_entry err{};
        fi_eq_readerr(eq_, &err, 0);
        die("%s: %s (%s)", what, fi_strerror(err.err),
            fi_eq_strerror(eq_, err.prov_errno, err.err_data, nullptr, 0));
      }
      if (ret != -FI_EAGAIN && ret != -FI_ETIMEDOUT)
        fi_die("fi_eq_sread", static_cast<int>(ret));
      watchdog().check();
    }
  }

  void establish_msg_server(Oob &oob) {
    fi_check("fi_fabric", fi_fabric(info_->fabric_attr, &fabric_, nullptr));
    open_eq();
    fi_check("fi_passive_ep", fi_passive_ep(fabric_, info_, &pep_, nullptr));
    fi_check("fi_pep_bind", fi_pep_bind(pep_, &eq_->fid, 0));
    fi_check("fi_listen", fi_listen(pep_));
    std::vector<uint8_t> name(256);
    size_t len = name.size();
    fi_check("fi_getname(pep)", fi_getname(&pep_->fid, name.data(), &len));
    name.resize(len);
    oob.send_value<uint32_t>(info_->addr_format);
    oob.send_blob(name);

    alignas(fi_eq_cm_entry) char buf[sizeof(fi_eq_cm_entry) + 256];
    auto *entry = reinterpret_cast<fi_eq_cm_entry *>(buf);
    uint32_t ev = wait_cm_event(entry, sizeof buf, "a connection request");
    if (ev != FI_CONNREQ)
      die("expected FI_CONNREQ on the event queue, got event %u", ev);
    conn_info_ = entry->info;
    fi_check("fi_domain", fi_domain(fabric_, conn_info_, &domain_, nullptr));
    open_cqs(domain_);
    open_endpoint(conn_info_);
    fi_check("fi_accept", fi_accept(ep_, nullptr, 0));
    ev = wait_cm_event(entry, sizeof buf, "the connection to complete (server)");
    if (ev != FI_CONNECTED)
      die("expected FI_CONNECTED on the event queue, got event %u", ev);
  }

  void establish_msg_client(Oob &oob) {
    uint32_t format = oob.recv_value<uint32_t>("the server's address format");
    std::vector<uint8_t> name = oob.recv_blob("the server's address");
    // Ask again, now with the server's address as the destination.
    fi_freeinfo(info_);
    info_ = nullptr;
    fi_info *hints = make_hints(FI_EP_MSG);
    hints->addr_format = format;
    hints->dest_addr = std::malloc(name.size());
    std::memcpy(hints->dest_addr, name.data(), name.size());
    hints->dest_addrlen = name.size();
    int ret = fi_getinfo(api_version(), nullptr, nullptr, 0, hints, &info_);
    fi_freeinfo(hints);
    if (ret)
      fi_die("fi_getinfo(client, with the server's address)", ret);
    fi_check("fi_fabric", fi_fabric(info_->fabric_attr, &fabric_, nullptr));
    open_eq();
    fi_check("fi_domain", fi_domain(fabric_, info_, &domain_, nullptr));
    open_cqs(domain_);
    open_endpoint(info_);
    fi_check("fi_connect", fi_connect(ep_, info_->dest_addr, nullptr, 0));
    alignas(fi_eq_cm_entry) char buf[sizeof(fi_eq_cm_entry) + 256];
    uint32_t ev = wait_cm_event(reinterpret_cast<fi_eq_cm_entry *>(buf), sizeof buf,
                                "the connection to complete (client)");
    if (ev != FI_CONNECTED)
      die("expected FI_CONNECTED on the event queue, got event %u", ev);
  }

  void establish_rdm(Oob &oob) {
    fi_check("fi_fabric", fi_fabric(info_->fabric_attr, &fabric_, nullptr));
    fi_check("fi_domain", fi_domain(fabric_, info_, &domain_, nullptr));
    fi_av_attr av_attr{};
    av_attr.type = info_->domain_attr->av_type;
    av_attr.count = 4;
    fi_check("fi_av_open", fi_av_open(domain_, &av_attr, &av_, nullptr));
    open_cqs(domain_);
    open_endpoint(info_);
    std::vector<uint8_t> name(256);
    size_t len = name.size();
    fi_check("fi_getname", fi_getname(&ep_->fid, name.data(), &len));
    name.resize(len);
    oob.send_blob(name);
    std::vector<uint8_t> peer = oob.recv_blob("the peer's endpoint name");
    int n = fi_av_insert(av_, peer.data(), 1, &peer_addr_, 0, nullptr);
    if (n != 1)
      fi_die("fi_av_insert", n < 0 ? n : -FI_EINVAL);
  }

  void progress() {
    read_cq(rxcq_, true, 0);
    read_cq(txcq_, false, 0);
  }

  /// Read one batch from a CQ (blocking up to timeout_ms when > 0) and record it.
  /// Returns the number of completions recorded.
  size_t read_cq(fid_cq *cq, bool rx, int timeout_ms) {
    fi_cq_data_entry e[kCqBatch];
    ssize_t n = timeout_ms > 0 ? fi_cq_sread(cq, e, kCqBatch, nullptr, timeout_ms)
                               : fi_cq_read(cq, e, kCqBatch);
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i)
        rx ? record_rx(e[i]) : record_tx(e[i]);
      return static_cast<size_t>(n);
    }
    if (n == -FI_EAGAIN || n == -FI_ETIMEDOUT)
      return 0;
    cq_failed(cq, rx, n);
    fi_die(timeout_ms > 0 ? "fi_cq_sread" : "fi_cq_read", static_cast<int>(n));
  }

  [[noreturn]] void cq_failed(fid_cq *cq, bool rx, ssize_t n) {
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(cq, &err, 0);
      die("%s completion failed: %s (%s)", rx ? "receive" : "transmit", fi_strerror(err.err),
          fi_cq_strerror(cq, err.prov_errno, err.err_data, nullptr, 0));
    }
    fi_die("fi_cq_read", static_cast<int>(n));
  }

  void record_tx(const fi_cq_data_entry &e) {
    ++tx_done_;
    if (track_tx_) {
      if (txq_tail_ - txq_head_ >= kTxQueue)
        die("transmit completion queue overflow (more operations outstanding than expected)");
      txq_[txq_tail_++ % kTxQueue] = e.op_context;
    }
  }

  /// Post a transmit until the provider takes it: tcp;ofi_rxm and shm return
  /// -FI_EAGAIN on a first post (connection or resource setup), so drive
  /// progress by reading the CQs and retry.
  template <class Post> void post_until_taken(const char *call, Post &&post) {
    for (;;) {
      ssize_t ret = post();
      if (ret == 0)
        break;
      if (ret != -FI_EAGAIN)
        fi_die(call, static_cast<int>(ret));
      progress();
      watchdog().what = "the provider to accept a transmit";
      spin_check();
    }
    ++tx_posted_;
  }

  RxEvent make_event(const fi_cq_data_entry &e) const {
    RxEvent ev;
    const fi_context *ctx = static_cast<const fi_context *>(e.op_context);
    ev.slot =
        ctx >= recv_ctx_ && ctx < recv_ctx_ + rx_slots_ ? static_cast<int>(ctx - recv_ctx_) : -1;
    // An incoming write-with-data carries FI_REMOTE_CQ_DATA together with
    // FI_REMOTE_WRITE; where remote CQ data consumes a receive (FI_RX_CQ_DATA)
    // it arrives as a receive completion with FI_REMOTE_CQ_DATA instead.
    const uint64_t remote_write = FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA;
    ev.remote_write = (e.flags & remote_write) == remote_write ||
                      (consumes_receive() && (e.flags & FI_REMOTE_CQ_DATA));
    ev.data = e.data;
    ev.len = e.len;
    return ev;
  }

  void record_rx(const fi_cq_data_entry &e) {
    RxEvent ev = make_event(e);
    if (rx_tail_ - rx_head_ >= kRxQueue)
      die("receive event queue overflow (the peer sent more than expected)");
    rxq_[rx_tail_++ % kRxQueue] = ev;
  }

  const Options &o_;
  bool server_;
  int rx_slots_;
  std::string provider_;
  bool rdm_ = false;
  bool block_ = false;

  fi_info *info_ = nullptr;
  fi_info *conn_info_ = nullptr;
  fid_fabric *fabric_ = nullptr;
  fid_domain *domain_ = nullptr;
  fid_eq *eq_ = nullptr;
  fid_pep *pep_ = nullptr;
  fid_av *av_ = nullptr;
  fid_cq *txcq_ = nullptr;
  fid_cq *rxcq_ = nullptr;
  fid_ep *ep_ = nullptr;
  fid_mr *mr_ = nullptr;
  void *desc_ = nullptr;
  fi_addr_t peer_addr_ = FI_ADDR_UNSPEC;
  RemoteInfo peer_;

  char *region_ = nullptr;
  size_t region_bytes_ = 0;
  size_t slot_bytes_ = 0;

  fi_context recv_ctx_[kMaxRxSlots]{};
  fi_context send_ctx_{};
  fi_context write_ctx_{};
  uint64_t tx_posted_ = 0, tx_done_ = 0;
  RxEvent rxq_[kRxQueue];
  bool track_tx_ = false;
  void *txq_[kTxQueue]{};
  uint64_t txq_head_ = 0, txq_tail_ = 0;
  uint64_t rx_head_ = 0, rx_tail_ = 0;
};

// ---- the ping-pong's posts (pingpong_loop.hpp) -------------------------------------

/// A ping or reply of `size` bytes from our send buffer.
inline void post(RawEndpoint &ep, Mode mode, size_t size, uint64_t seq) {
  if (mode == Mode::Send)
    ep.post_send(size);
  else
    ep.post_writedata(size, seq & 0xffffffffu);
}

/// The reply of an echo: the bytes the ping left, from where they landed.
inline void post_echo(RawEndpoint &ep, Mode mode, size_t size, uint64_t seq, const RxEvent &ping) {
  if (mode == Mode::Send)
    ep.post_send_from(ep.slot_buf(ping.slot), size);
  else
    ep.post_writedata_from(ep.target_buf(), size, seq & 0xffffffffu);
}

} // namespace raw
