// End-to-end tests of librfaas against a real executor manager, its zygote
// and real executor processes, over one device (provider) per run:
//
//   rfaas_e2e_tests --device lo-tcp [gtest flags]
//   rfaas_e2e_tests --devices /tmp/devices.json --device eth0-verbs --host 10.99.0.1
//   rfaas_e2e_tests ... --manager-device eth1-verbs --host 10.99.0.2
//
// --devices is the device database (default config/devices.json), --device
// the client's entry, --manager-device the manager's (default: the client's),
// --host the address the manager listens on (default 127.0.0.1; rdma_cm
// cannot use the loopback address, so on verbs it is the device's IP).
//
// main() starts one executor_manager for the whole run (port 0, waiting for
// its readiness line) and stops it at the end; every test allocates from it.
// Nothing is mocked and nothing waits by sleeping; the only fixed numbers are
// generous deadlines.
#include <rfaas/rfaas.hpp>

#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "allocate_wait.hpp"
#include "process.hpp"

using namespace std::chrono_literals;
using rfaas::e2e::Process;

namespace {

struct Setup {
  std::string device = "lo-tcp";
  std::string manager_device; // empty: the client's
  std::string host = "127.0.0.1";
  // Capabilities the run switches off (RDMALIB_DISABLE_CAPS, canonical order):
  // checked on the client's negotiated network, so that a run meant to take
  // the fallback paths cannot silently take the native ones.
  std::string expect_masked;
  std::string devices = RFAAS_E2E_DEVICES;
  std::string manager_bin = RFAAS_E2E_MANAGER;
  std::string manager_config = RFAAS_E2E_MANAGER_CONFIG;
  std::string library = RFAAS_E2E_LIBRARY;
  std::string helper = RFAAS_E2E_HELPER;
  std::string probe = RFAAS_E2E_PROBE;
  std::string workdir;
  Process manager;
  rfaas::server server;
  std::string address;
} g;

/// The last 4000 characters of a log in the work directory.
std::string log_tail(const std::string &name) {
  std::ifstream f(g.workdir + "/" + name);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return text.size() > 4000 ? text.substr(text.size() - 4000) : text;
}

std::string manager_log() { return log_tail("manager.log"); }

/// A whole log of the work directory.
std::string full_log(const std::string &name) {
  std::ifstream f(g.workdir + "/" + name);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

/// True when the whole manager log (not just its tail) holds `needle`.
bool manager_log_has(const std::string &needle) {
  return full_log("manager.log").find(needle) != std::string::npos;
}

/// Every CPU this process may use, as a Linux cpulist ("0,1").
std::string cpu_list() {
  cpu_set_t set;
  std::string out;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set))
        out += (out.empty() ? "" : ",") + std::to_string(c);
  return out.empty() ? "0" : out;
}

rfaas::device device() { return rfaas::device_database::load(g.devices).find(g.device); }

rfaas::allocation_options options(uint32_t cores = 1, uint32_t slots = 1) {
  rfaas::allocation_options o;
  o.cores = cores;
  o.slots = slots;
  o.library = g.library;
  // Warm workers (block between calls): the machine running the tests may
  // have fewer cores than busy-polling threads.
  o.hot_timeout_ms = 0;
  // Above the manager's 256 MiB default: tcp;ofi_rxm's per-endpoint buffer
  // pools do not fit two workers in it (fi_enable fails with ENOMEM). Two
  // such allocations still fit the example config's 1024 MiB.
  o.memory_mib = 480;
  o.max_input_size = 64 * 1024;
  o.max_output_size = 4 * 64 * 1024;
  return o;
}

/// allocate() on the suite's manager, waiting out resources_unavailable.
void allocate(rfaas::executor &ex, const rfaas::allocation_options &o) {
  rfaas::e2e::allocate_waiting(ex, g.server, o);
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<uint8_t>(i * 31 + seed * 17 + (i >> 9));
  return v;
}

uint64_t sum_squares(const uint64_t *v, size_t n) {
  uint64_t s = 0;
  for (size_t i = 0; i < n; ++i)
    s += v[i] * v[i];
  return s;
}

#define ASSERT_RESULT(expr)                                                                        \
  do {                                                                                             \
    rfaas::result r_ = (expr);                                                                     \
    ASSERT_TRUE(r_.ok()) << #expr << ": " << rfaas::to_string(r_.status) << " detail "             \
                         << r_.detail;                                                             \
  } while (0)

class E2E : public ::testing::Test {
protected:
  void TearDown() override {
    if (HasFailure())
      std::fprintf(stderr, "---- manager log (tail) ----\n%s\n", manager_log().c_str());
  }
};

TEST_F(E2E, Allocation) {
  rfaas::executor ex(device());
  EXPECT_FALSE(ex.allocated());
  allocate(ex, options(1, 2));
  EXPECT_TRUE(ex.allocated());
  EXPECT_EQ(ex.workers(), 1u);
  EXPECT_EQ(ex.slots(), 2u);
  EXPECT_NE(ex.allocation_id(), 0u);
  const rfaas::cold_start &c = ex.cold_start_times();
  EXPECT_GT(c.connected.count(), 0);
  EXPECT_LE(c.connected, c.allocated);
  EXPECT_LE(c.allocated, c.workers_connected);
  EXPECT_LE(c.workers_connected, c.code_shipped);
  EXPECT_LE(c.code_shipped, c.ready);
  if (!g.expect_masked.empty()) {
    const std::string net = ex.describe_network();
    EXPECT_NE(net.find(" masked=" + g.expect_masked + " "), std::string::npos) << net;
    size_t at = 0;
    while (at <= g.expect_masked.size()) {
      size_t end = g.expect_masked.find(',', at);
      if (end == std::string::npos)
        end = g.expect_masked.size();
      const std::string cap = g.expect_masked.substr(at, end - at);
      EXPECT_NE(net.find(" " + cap + "=no"), std::string::npos) << cap << " is not off: " << net;
      at = end + 1;
    }
  }
  ex.deallocate();
  EXPECT_FALSE(ex.allocated());
  // The same executor can lease again.
  allocate(ex, options());
  std::vector<uint8_t> in = pattern(10, 1), out(10);
  ASSERT_RESULT(ex.execute("echo", in, out));
  EXPECT_EQ(in, out);
}

TEST_F(E2E, ExecuteBeforeAllocateThrows) {
  rfaas::executor ex(device());
  std::vector<uint8_t> in(4), out(4);
  try {
    ex.execute("echo", in, out);
    FAIL() << "no exception";
  } catch (const rfaas::Error &e) {
    EXPECT_EQ(e.where(), rfaas::phase::usage);
  }
}

TEST_F(E2E, SyncAsyncParallel) {
  rfaas::executor ex(device());
  allocate(ex, options(2, 2));
  std::vector<uint8_t> out(4 * 64 * 1024);

  // Synchronous: echo, compute, output larger than input.
  std::vector<uint8_t> in = pattern(333, 2);
  rfaas::result r = ex.execute("echo", in, out);
  ASSERT_TRUE(r.ok()) << rfaas::to_string(r.status);
  EXPECT_EQ(r.output_size, in.size());
  EXPECT_TRUE(std::equal(in.begin(), in.end(), out.begin()));

  std::vector<uint64_t, rfaas::allocator<uint64_t>> values(rfaas::allocator<uint64_t>{ex});
  values.resize(5000);
  std::iota(values.begin(), values.end(), 3);
  uint64_t sum = 0;
  r = ex.execute("sum_squares", values, rfaas::mutable_buffer(&sum, sizeof sum));
  ASSERT_TRUE(r.ok()) << rfaas::to_string(r.status);
  EXPECT_EQ(sum, sum_squares(values.data(), values.size()));

  r = ex.execute("expand", in, out);
  ASSERT_TRUE(r.ok()) << rfaas::to_string(r.status);
  ASSERT_EQ(r.output_size, 4 * in.size());
  for (size_t k = 0; k < 4; ++k)
    EXPECT_TRUE(std::equal(in.begin(), in.end(), out.begin() + k * in.size())) << "copy " << k;

  // Asynchronous: every slot of every worker in flight at once.
  const size_t n = size_t(ex.workers()) * ex.slots();
  std::vector<std::vector<uint8_t>> ins, outs;
  for (size_t i = 0; i < n; ++i) {
    ins.push_back(pattern(100 + 7 * i, static_cast<uint32_t>(i)));
    outs.emplace_back(ins.back().size());
  }
  std::vector<std::future<rfaas::result>> futures;
  for (size_t i = 0; i < n; ++i)
    futures.push_back(ex.async("echo", ins[i], outs[i]));
  // One more than there are slots: reported busy at once, not queued.
  std::vector<uint8_t> extra_out(8);
  rfaas::result busy = ex.async("echo", ins[0], extra_out).get();
  EXPECT_EQ(busy.status, rfaas::status::busy);
  for (size_t i = n; i-- > 0;) { // out of order on purpose
    rfaas::result ar = futures[i].get();
    ASSERT_TRUE(ar.ok()) << i << ": " << rfaas::to_string(ar.status);
    EXPECT_EQ(outs[i], ins[i]) << i;
  }

  // Dropped before get(): the invocation is abandoned (its output is never
  // written) and its slot serves again once the late result is in.
  for (std::vector<uint8_t> &o : outs)
    std::fill(o.begin(), o.end(), uint8_t(0));
  for (size_t i = 0; i < n; ++i)
    ex.async("echo", ins[i], outs[i]);
  std::vector<std::vector<uint8_t>> outs2;
  for (size_t i = 0; i < n; ++i)
    outs2.emplace_back(ins[i].size());
  std::vector<rfaas::async_result> again(n);
  const auto until = std::chrono::steady_clock::now() + 30s;
  for (size_t i = 0; i < n; ++i) {
    for (;;) {
      again[i] = ex.async("echo", ins[i], outs2[i]);
      // Posted: deferred until get()/wait(). Refused: ready, busy.
      if (again[i].wait_for(0s) == std::future_status::deferred)
        break;
      ASSERT_EQ(again[i].get().status, rfaas::status::busy);
      ASSERT_LT(std::chrono::steady_clock::now(), until)
          << "slot of invocation " << i << " never came back";
    }
  }
  for (size_t i = 0; i < n; ++i) {
    again[i].wait();
    EXPECT_EQ(again[i].wait_for(0s), std::future_status::ready);
    rfaas::result ar = again[i].get();
    ASSERT_TRUE(ar.ok()) << i << ": " << rfaas::to_string(ar.status);
    EXPECT_EQ(outs2[i], ins[i]) << i;
    EXPECT_FALSE(again[i].valid());
    EXPECT_THROW(again[i].get(), std::future_error);
  }
  for (size_t i = 0; i < n; ++i)
    EXPECT_TRUE(std::all_of(outs[i].begin(), outs[i].end(), [](uint8_t b) { return b == 0; }))
        << "the abandoned invocation " << i << " wrote its output";

  // Parallel: more inputs than slots, queued over every worker.
  const size_t m = 3 * n + 1;
  std::vector<std::vector<uint64_t>> pins(m);
  std::vector<uint64_t> sums(m, 0);
  std::vector<rfaas::const_buffer> ib;
  std::vector<rfaas::mutable_buffer> ob;
  for (size_t i = 0; i < m; ++i) {
    pins[i].resize(50 + i);
    std::iota(pins[i].begin(), pins[i].end(), i * 1000);
    ib.emplace_back(pins[i]);
    ob.emplace_back(&sums[i], sizeof(uint64_t));
  }
  std::vector<rfaas::result> rs = ex.execute_parallel("sum_squares", ib, ob);
  ASSERT_EQ(rs.size(), m);
  for (size_t i = 0; i < m; ++i) {
    EXPECT_TRUE(rs[i].ok()) << i << ": " << rfaas::to_string(rs[i].status);
    EXPECT_EQ(sums[i], sum_squares(pins[i].data(), pins[i].size())) << i;
  }
  // Mismatched counts are refused, not guessed.
  ob.pop_back();
  rs = ex.execute_parallel("sum_squares", ib, ob);
  ASSERT_EQ(rs.size(), ib.size());
  EXPECT_EQ(rs[0].status, rfaas::status::invalid_argument);
}

TEST_F(E2E, PayloadSizes) {
  rfaas::executor ex(device());
  rfaas::allocation_options o = options();
  o.max_input_size = 1 << 20;
  o.max_output_size = 1 << 20;
  allocate(ex, o);
  std::vector<uint8_t> out(1 << 20);
  for (size_t size : {size_t(1), size_t(7), size_t(8), size_t(1000), size_t(4096),
                      size_t(64 * 1024), size_t(1000 * 1000), size_t(1 << 20)}) {
    std::vector<uint8_t> in = pattern(size, static_cast<uint32_t>(size));
    rfaas::result r = ex.execute("echo", in, out);
    ASSERT_TRUE(r.ok()) << size << ": " << rfaas::to_string(r.status);
    ASSERT_EQ(r.output_size, size);
    EXPECT_TRUE(std::equal(in.begin(), in.end(), out.begin())) << size;
    // Zero-copy path for the same size.
    std::vector<uint8_t, rfaas::allocator<uint8_t>> reg(in.begin(), in.end(),
                                                        rfaas::allocator<uint8_t>{ex});
    std::fill(out.begin(), out.begin() + size, 0);
    r = ex.execute("echo", reg, out);
    ASSERT_TRUE(r.ok()) << size << " (registered): " << rfaas::to_string(r.status);
    EXPECT_TRUE(std::equal(in.begin(), in.end(), out.begin())) << size << " (registered)";
  }
  // Empty input: legal, empty output.
  rfaas::result r = ex.execute("echo", rfaas::const_buffer(nullptr, 0), out);
  ASSERT_TRUE(r.ok()) << rfaas::to_string(r.status);
  EXPECT_EQ(r.output_size, 0u);
}

namespace {
using RegisteredBytes = std::vector<uint8_t, rfaas::allocator<uint8_t>>;

bool all_equal(const uint8_t *p, size_t n, uint8_t v) {
  return std::all_of(p, p + n, [v](uint8_t b) { return b == v; });
}
} // namespace

// A result whose output is rfaas::allocator memory is written there by the
// worker (header in the block's prefix): the client copies nothing. Other
// outputs still get their result through a result slot.
TEST_F(E2E, ResultsLandInRegisteredOutputWithoutACopy) {
  rfaas::executor ex(device());
  allocate(ex, options(1, 2));
  const std::vector<uint8_t> in = pattern(5000, 21);
  RegisteredBytes out(8192, 0, rfaas::allocator<uint8_t>{ex});
  const rfaas::copy_counters c0 = ex.copies();
  rfaas::result r = ex.execute("echo", in, rfaas::mutable_buffer(out.data(), out.size()));
  ASSERT_TRUE(r.ok()) << rfaas::to_string(r.status);
  ASSERT_EQ(r.output_size, in.size());
  EXPECT_TRUE(std::equal(in.begin(), in.end(), out.begin()));
  EXPECT_EQ(ex.copies().results_in_place, c0.results_in_place + 1);
  EXPECT_EQ(ex.copies().results_copied, c0.results_copied);
  EXPECT_EQ(ex.copies().inputs_copied, c0.inputs_copied + 1);

  // Input and output the same registered block: no copy either way.
  RegisteredBytes both(in.begin(), in.end(), rfaas::allocator<uint8_t>{ex});
  const rfaas::copy_counters c1 = ex.copies();
  r = ex.execute("echo", rfaas::const_buffer(both.data(), both.size()),
                 rfaas::mutable_buffer(both.data(), both.size()));
  ASSERT_TRUE(r.ok()) << rfaas::to_string(r.status);
  EXPECT_EQ(r.output_size, in.size());
  EXPECT_TRUE(std::equal(in.begin(), in.end(), both.begin()));
  EXPECT_EQ(ex.copies().inputs_in_place, c1.inputs_in_place + 1);
  EXPECT_EQ(ex.copies().results_in_place, c1.results_in_place + 1);

  // Plain memory: through the result slot, copied.
  std::vector<uint8_t> plain(8192);
  const rfaas::copy_counters c2 = ex.copies();
  r = ex.execute("echo", in, plain);
  ASSERT_TRUE(r.ok()) << rfaas::to_string(r.status);
  EXPECT_TRUE(std::equal(in.begin(), in.end(), plain.begin()));
  EXPECT_EQ(ex.copies().results_copied, c2.results_copied + 1);
  EXPECT_EQ(ex.copies().results_in_place, c2.results_in_place);

  // A registered output too small for the result: output_too_large, and not
  // a byte of it (nor of what follows it in the block) is written.
  RegisteredBytes small(300, 0xAB, rfaas::allocator<uint8_t>{ex});
  r = ex.execute("echo", in, rfaas::mutable_buffer(small.data(), 100));
  EXPECT_EQ(r.status, rfaas::status::output_too_large) << rfaas::to_string(r.status);
  EXPECT_EQ(r.detail, in.size());
  EXPECT_TRUE(all_equal(small.data(), small.size(), 0xAB));
  // The same block, large enough now: in place.
  const std::vector<uint8_t> in2 = pattern(250, 22);
  r = ex.execute("echo", in2, rfaas::mutable_buffer(small.data(), small.size()));
  ASSERT_TRUE(r.ok()) << rfaas::to_string(r.status);
  EXPECT_TRUE(std::equal(in2.begin(), in2.end(), small.begin()));
  EXPECT_TRUE(all_equal(small.data() + in2.size(), small.size() - in2.size(), 0xAB));
}

// Two invocations in flight at once whose outputs are two parts of one
// registered block: the part at the block's start receives its result in
// place, the other one through a result slot (only a block's start has
// header room); both are right and the bytes around them are untouched.
TEST_F(E2E, TwoInvocationsIntoPartsOfOneRegisteredBlock) {
  rfaas::executor ex(device());
  allocate(ex, options(1, 2));
  RegisteredBytes block(3000, 0x5A, rfaas::allocator<uint8_t>{ex});
  const std::vector<uint8_t> a = pattern(1000, 31), b = pattern(900, 32);
  const rfaas::copy_counters c0 = ex.copies();
  std::future<rfaas::result> fa = ex.async("echo", a, rfaas::mutable_buffer(block.data(), 1000));
  std::future<rfaas::result> fb =
      ex.async("echo", b, rfaas::mutable_buffer(block.data() + 1500, 1000));
  rfaas::result ra = fa.get(), rb = fb.get();
  ASSERT_TRUE(ra.ok()) << rfaas::to_string(ra.status);
  ASSERT_TRUE(rb.ok()) << rfaas::to_string(rb.status);
  EXPECT_TRUE(std::equal(a.begin(), a.end(), block.begin()));
  EXPECT_TRUE(all_equal(block.data() + 1000, 500, 0x5A));
  EXPECT_TRUE(std::equal(b.begin(), b.end(), block.begin() + 1500));
  EXPECT_TRUE(all_equal(block.data() + 2400, 600, 0x5A));
  EXPECT_EQ(ex.copies().results_in_place, c0.results_in_place + 1);
  EXPECT_EQ(ex.copies().results_copied, c0.results_copied + 1);
}

// The caller gives up on an invocation whose output is registered memory and
// reuses the buffer; the worker finishes later and writes its result. The
// block's key was revoked at the timeout: the late result must not land.
TEST_F(E2E, LateResultOfAnAbandonedInvocationNeverLandsInTheReusedBuffer) {
  rfaas::executor ex(device());
  allocate(ex, options(1, 2));
  RegisteredBytes out(4096, 0, rfaas::allocator<uint8_t>{ex});
  std::vector<uint8_t> in(4 + 2000);
  const uint32_t ms = 1500;
  std::memcpy(in.data(), &ms, sizeof ms);
  const std::vector<uint8_t> body = pattern(2000, 41);
  std::copy(body.begin(), body.end(), in.begin() + 4);
  rfaas::result r =
      ex.execute("sleep_echo", in, rfaas::mutable_buffer(out.data(), out.size()), 200ms);
  ASSERT_EQ(r.status, rfaas::status::timeout) << rfaas::to_string(r.status);
  EXPECT_EQ(ex.copies().targets_revoked, 1u);
  std::fill(out.begin(), out.end(), 0xC5); // the caller's next use of it

  // The same worker serves this after sleep_echo posted its late result, and
  // the link is ordered: when it answers, the late write was handled. Its
  // deadline is well past the end of the sleep, so the late write was tried
  // in any case when it returns.
  std::vector<uint8_t> in2 = pattern(64, 42), plain(64);
  r = ex.execute("echo", in2, plain, 5s);
  // Providers that end a connection on a write with an unknown key take the
  // worker with it (closed; tcp;ofi_rxm's link goes silent: timeout); the
  // others refuse the write only.
  std::fprintf(stderr, "after the refused late result the worker answered: %s\n",
               rfaas::to_string(r.status));
  EXPECT_TRUE(r.ok() || r.status == rfaas::status::closed || r.status == rfaas::status::timeout)
      << rfaas::to_string(r.status);
  EXPECT_TRUE(all_equal(out.data(), out.size(), 0xC5)) << "the late result landed";
  if (r.ok()) {
    EXPECT_EQ(in2, plain);
    // The block, under its new key, takes results in place again.
    const rfaas::copy_counters c = ex.copies();
    r = ex.execute("echo", in2, rfaas::mutable_buffer(out.data(), out.size()));
    ASSERT_TRUE(r.ok()) << rfaas::to_string(r.status);
    EXPECT_TRUE(std::equal(in2.begin(), in2.end(), out.begin()));
    EXPECT_EQ(ex.copies().results_in_place, c.results_in_place + 1);
  }
}

// The caller gives up on an invocation whose input is registered memory and,
// told of the timeout, frees the block. The late result must not touch the
// freed block's bookkeeping: AddressSanitizer reports it as a use after free,
// and elsewhere the block allocated next (its bookkeeping usually at the same
// address) would be counted busy forever and lose its zero copy.
TEST_F(E2E, InputBlockOfAnAbandonedInvocationMayBeFreedAtTheTimeout) {
  rfaas::executor ex(device());
  allocate(ex, options(1, 2));
  std::vector<uint8_t> plain(4096);
  {
    RegisteredBytes in(4 + 1000, 0, rfaas::allocator<uint8_t>{ex});
    const uint32_t ms = 800;
    std::memcpy(in.data(), &ms, sizeof ms);
    const rfaas::copy_counters c0 = ex.copies();
    rfaas::result r =
        ex.execute("sleep_echo", rfaas::const_buffer(in.data(), in.size()), plain, 100ms);
    ASSERT_EQ(r.status, rfaas::status::timeout) << rfaas::to_string(r.status);
    ASSERT_EQ(ex.copies().inputs_in_place, c0.inputs_in_place + 1) << "the input was copied";
  } // freed at the timeout, as a caller may

  // The same worker answers this after the late result (the link is ordered):
  // this call's progress handles both.
  const std::vector<uint8_t> body = pattern(64, 51);
  RegisteredBytes next(body.begin(), body.end(), rfaas::allocator<uint8_t>{ex});
  std::vector<uint8_t> out(64);
  rfaas::result r = ex.execute("echo", rfaas::const_buffer(next.data(), next.size()), out, 5s);
  ASSERT_TRUE(r.ok()) << rfaas::to_string(r.status);
  EXPECT_TRUE(std::equal(next.begin(), next.end(), out.begin()));
  // The new block is free again: its next use is zero copy.
  const rfaas::copy_counters c1 = ex.copies();
  r = ex.execute("echo", rfaas::const_buffer(next.data(), next.size()), out);
  ASSERT_TRUE(r.ok()) << rfaas::to_string(r.status);
  EXPECT_EQ(ex.copies().inputs_in_place, c1.inputs_in_place + 1)
      << "the block stayed busy: the late result released another invocation's block";
}

TEST_F(E2E, TenThousandInvocationsFlatMemory) {
  rfaas::executor ex(device());
  rfaas::allocation_options o = options();
  o.hot_timeout_ms = 100; // hot between back-to-back calls
  allocate(ex, o);
  std::vector<uint8_t> in = pattern(64, 5), out(64);
  // Reach steady state: lazy allocations, caches, and, on fabrics that open
  // endpoints ahead, the replacement for the one the worker's link took
  // (opened once the fabric was quiet for Fabric::kRefillQuietMs, 100 ms;
  // its heap would count as growth if it were opened during the calls below,
  // as happened on a loaded host).
  const auto settled = std::chrono::steady_clock::now() + 600ms;
  for (int i = 0; i < 1000 || std::chrono::steady_clock::now() < settled; ++i)
    ASSERT_RESULT(ex.execute("echo", in, out));
  const size_t before = rfaas::e2e::private_resident_bytes();
  const size_t heap_before = rfaas::e2e::heap_in_use_bytes();
  for (uint32_t i = 0; i < 10000; ++i) {
    std::memcpy(in.data(), &i, sizeof i);
    rfaas::result r = ex.execute("echo", in, out);
    ASSERT_TRUE(r.ok()) << "call " << i << ": " << rfaas::to_string(r.status);
    uint32_t back;
    std::memcpy(&back, out.data(), sizeof back);
    ASSERT_EQ(back, i);
  }
  const size_t after = rfaas::e2e::private_resident_bytes();
  const size_t heap_after = rfaas::e2e::heap_in_use_bytes();
  std::printf("private RSS before %zu KiB, after 10000 calls %zu KiB; heap in use %zu -> %zu "
              "KiB\n",
              before / 1024, after / 1024, heap_before / 1024, heap_after / 1024);
#if defined(__SANITIZE_ADDRESS__)
  // ASan replaces malloc (mallinfo2 reports nothing) and keeps freed blocks
  // in its quarantine (up to 256 MiB), so neither figure says anything here.
  std::printf("memory growth not checked: AddressSanitizer build\n");
#else
  // The hot path allocates nothing: what the heap holds must not grow by more
  // than allocator noise. Resident size is not the measure: providers touch
  // receive buffers they allocated long before for the first time as they
  // rotate through them (tcp;ofi_rxm: ~0.9 MiB over these calls); it is kept
  // to a generous bound that still catches a leak of ~100 B per call. Shared
  // pages are left out: on shm the next link's endpoint, opened ahead on a
  // background thread (Fabric::prepare), fills a shared-memory region of its
  // own while the calls run.
  EXPECT_LT(heap_after, heap_before + 64 * 1024)
      << "the heap grew by " << (heap_after - heap_before) << " B over 10000 calls";
  EXPECT_LT(after, before + 4 * 1024 * 1024)
      << "private resident memory grew by " << (after - before) << " B";
#endif
}

TEST_F(E2E, TwoClientsAtOnce) {
  // Two executors (each with its own network, listener and lease) driven
  // from two threads: the manager serves both allocations concurrently.
  std::vector<std::string> errors(2);
  auto client = [&](int k) {
    try {
      rfaas::executor ex(device());
      allocate(ex, options());
      std::vector<uint8_t> in = pattern(256, 100 + k), out(256);
      for (int i = 0; i < 500; ++i) {
        in[0] = static_cast<uint8_t>(i);
        rfaas::result r = ex.execute("echo", in, out);
        if (!r.ok() || out != in) {
          errors[k] = std::string("call ") + std::to_string(i) + ": " + rfaas::to_string(r.status);
          return;
        }
      }
    } catch (const std::exception &e) {
      errors[k] = e.what();
    }
  };
  std::thread a(client, 0), b(client, 1);
  a.join();
  b.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

TEST_F(E2E, UnknownFunction) {
  rfaas::executor ex(device());
  allocate(ex, options());
  std::vector<uint8_t> in(16, 1), out(16);
  rfaas::result r = ex.execute("does_not_exist", in, out);
  EXPECT_EQ(r.status, rfaas::status::unknown_function);
  EXPECT_EQ(r.detail, rfaas::function_name("does_not_exist").hash());
  // The executor keeps serving, also calls by a name hashed once, and the
  // worker's remembered entry follows the name from call to call.
  ASSERT_RESULT(ex.execute("echo", in, out));
  static constexpr rfaas::function_name echo("echo"), missing("missing");
  for (int i = 0; i < 3; ++i) {
    in[0] = static_cast<uint8_t>(i);
    ASSERT_RESULT(ex.execute(echo, in, out));
    EXPECT_EQ(out[0], in[0]);
    EXPECT_EQ(ex.execute(missing, in, out).status, rfaas::status::unknown_function);
    std::vector<uint8_t> squares(16);
    rfaas::result sq = ex.execute("sum_squares", in, squares);
    ASSERT_TRUE(sq.ok()) << rfaas::to_string(sq.status);
    EXPECT_EQ(sq.output_size, 8u); // not echo's 16: the entry followed the name
  }
}

TEST_F(E2E, OversizedPayloadAndOutput) {
  rfaas::executor ex(device());
  rfaas::allocation_options o = options();
  o.max_input_size = 4096;
  o.max_output_size = 4096;
  allocate(ex, o);
  std::vector<uint8_t> big(4097, 3), out(4096);
  rfaas::result r = ex.execute("echo", big, out);
  EXPECT_EQ(r.status, rfaas::status::payload_too_large);
  EXPECT_EQ(r.detail, 4096u);
  // The function produces more than the result slot: the executor says so.
  std::vector<uint8_t> in(2000, 4);
  r = ex.execute("expand", in, out);
  EXPECT_EQ(r.status, rfaas::status::output_too_large);
  EXPECT_EQ(r.detail, 8000u);
  r = ex.execute("bad_output_size", in, out);
  EXPECT_EQ(r.status, rfaas::status::output_too_large);
  // The output fits the slot but not the caller's buffer.
  std::vector<uint8_t> small(100);
  r = ex.execute("echo", in, small);
  EXPECT_EQ(r.status, rfaas::status::output_too_large);
  EXPECT_EQ(r.detail, 2000u);
  ASSERT_RESULT(ex.execute("echo", in, out));
}

TEST_F(E2E, CrashingFunction) {
  rfaas::executor victim(device());
  allocate(victim, options());
  std::vector<uint8_t> in(8, 0), out(64);
  rfaas::result r = victim.execute("crash", in, out);
  EXPECT_EQ(r.status, rfaas::status::function_crashed);
  EXPECT_EQ(r.detail, static_cast<uint32_t>(SIGSEGV));
  // The executor ended: later calls fail cleanly instead of hanging.
  r = victim.execute("echo", in, out, 10s);
  EXPECT_EQ(r.status, rfaas::status::closed) << rfaas::to_string(r.status);
  victim.deallocate();
  // The manager keeps serving others.
  rfaas::executor other(device());
  allocate(other, options());
  std::vector<uint8_t> in2 = pattern(100, 9), out2(100);
  ASSERT_RESULT(other.execute("echo", in2, out2));
  EXPECT_EQ(in2, out2);
}

namespace {

/// Call `function` (the examples' overflow or overflow_in_place) so that it
/// runs 1, 4096 and 1 MiB bytes past its capacity, byte by byte and with one
/// memset: each call must answer function_crashed (SIGSEGV), and
/// `still_serves(n)` checks after the n-th that the worker goes on.
template <class Check>
void overflows_are_caught(rfaas::executor &ex, const char *function, Check still_serves) {
  std::vector<uint8_t> out(1000);
  uint32_t calls = 0;
  for (uint32_t how : {0u, 1u}) { // byte by byte, one memset
    for (uint32_t extra : {1u, 4096u, 1u << 20}) {
#if defined(__SANITIZE_ADDRESS__)
      // AddressSanitizer checks a memset's whole range first: one reaching
      // past the guard page into memory it poisoned is reported and aborts
      // (the executor then ends) before the first store faults.
      if (how == 1 && extra > 4096) {
        std::printf("skipped under AddressSanitizer: memset %u bytes past the capacity\n", extra);
        continue;
      }
#endif
      SCOPED_TRACE(::testing::Message()
                   << function << ", extra " << extra << (how ? " memset" : " loop"));
      uint32_t args[2] = {extra, how};
      std::vector<uint8_t> in(sizeof args);
      std::memcpy(in.data(), args, sizeof args);
      rfaas::result r = ex.execute(function, in, out, 30s);
      EXPECT_EQ(r.status, rfaas::status::function_crashed) << rfaas::to_string(r.status);
      EXPECT_EQ(r.detail, static_cast<uint32_t>(SIGSEGV));
      still_serves(++calls);
    }
  }
}

} // namespace

// A function that writes past its output capacity faults in the guard page
// after its result slot: the client gets function_crashed (SIGSEGV), nothing
// else of the executor is touched, and the same worker answers the next call.
TEST_F(E2E, OutputOverflowIsCaughtAndTheWorkerGoesOn) {
  rfaas::executor ex(device());
  rfaas::allocation_options o = options(1, 2);
  o.max_output_size = 1000; // not a page multiple: the slot's end is still at a guard
  allocate(ex, o);
  overflows_are_caught(ex, "overflow", [&](uint32_t n) {
    // The worker is still there and right.
    std::vector<uint8_t> echo_in = pattern(1000, n), echo_out(1000);
    ASSERT_RESULT(ex.execute("echo", echo_in, echo_out, 30s));
    EXPECT_EQ(echo_in, echo_out);
  });
  // Both slots still serve, at once.
  std::vector<uint8_t> a = pattern(500, 100), b = pattern(700, 200), oa(500), ob(700);
  auto fa = ex.async("echo", a, oa);
  auto fb = ex.async("echo", b, ob);
  ASSERT_RESULT(fa.get());
  ASSERT_RESULT(fb.get());
  EXPECT_EQ(a, oa);
  EXPECT_EQ(b, ob);
}

// In-place functions (RFAAS_FUNCTION_IN_PLACE) write their output over their
// input in the worker's input slot, which goes back to the client from there:
// right on every path a result takes (result slot, registered output), with
// the input slot's room as capacity, and an overflow stops at the guard page
// after the input slot like one of a result slot does.
TEST_F(E2E, InPlaceFunctionsWriteOverTheirInput) {
  rfaas::executor ex(device());
  rfaas::allocation_options o = options(1, 2);
  o.max_input_size = 64 * 1024;
  o.max_output_size = 4096; // smaller than the input slot
  allocate(ex, o);
  auto inverted = [](std::vector<uint8_t> v) {
    for (uint8_t &b : v)
      b = static_cast<uint8_t>(~b);
    return v;
  };
  // Through the result slot (plain output memory).
  std::vector<uint8_t> out(8192);
  for (size_t size : {size_t(1), size_t(7), size_t(1000), size_t(4096)}) {
    std::vector<uint8_t> in = pattern(size, static_cast<uint32_t>(size));
    rfaas::result r = ex.execute("invert_in_place", in, out, 30s);
    ASSERT_RESULT(r);
    ASSERT_EQ(r.output_size, size);
    EXPECT_TRUE(std::equal(out.begin(), out.begin() + size, inverted(in).begin())) << size;
  }
  // More than the result slot holds: output_too_large, the worker goes on.
  std::vector<uint8_t> big = pattern(5000, 5);
  rfaas::result r = ex.execute("invert_in_place", big, out, 30s);
  EXPECT_EQ(r.status, rfaas::status::output_too_large) << rfaas::to_string(r.status);
  EXPECT_EQ(r.detail, 5000u);
  // A registered output takes more than the result slot would: the input
  // slot's whole room, straight from the input slot into the caller's block.
  std::vector<uint8_t> large = pattern(60000, 6);
  RegisteredBytes target(64 * 1024, 0, rfaas::allocator<uint8_t>{ex});
  r = ex.execute("invert_in_place", large, rfaas::mutable_buffer(target.data(), target.size()),
                 30s);
  ASSERT_RESULT(r);
  ASSERT_EQ(r.output_size, large.size());
  EXPECT_EQ(inverted(std::vector<uint8_t>(target.begin(), target.begin() + large.size())), large);
  // Input and output one registered block, no copy anywhere.
  RegisteredBytes both(large.begin(), large.end(), rfaas::allocator<uint8_t>{ex});
  r = ex.execute("echo_in_place", rfaas::const_buffer(both.data(), both.size()),
                 rfaas::mutable_buffer(both.data(), both.size()), 30s);
  ASSERT_RESULT(r);
  EXPECT_TRUE(std::equal(large.begin(), large.end(), both.begin()));
  // Running past the input slot faults in its guard page.
  overflows_are_caught(ex, "overflow_in_place", [&](uint32_t n) {
    std::vector<uint8_t> again = pattern(3000, n), again_out(3000);
    ASSERT_RESULT(ex.execute("invert_in_place", again, again_out, 30s));
    EXPECT_EQ(inverted(again), again_out);
  });
  // Both input slots at once.
  std::vector<uint8_t> a = pattern(500, 100), b = pattern(700, 200), oa(500), ob(700);
  auto fa = ex.async("invert_in_place", a, oa);
  auto fb = ex.async("echo_in_place", b, ob);
  ASSERT_RESULT(fa.get());
  ASSERT_RESULT(fb.get());
  EXPECT_EQ(inverted(a), oa);
  EXPECT_EQ(b, ob);
}

// Libraries that break the function ABI are refused when the allocation is
// made, and the client's error says what is wrong.
TEST_F(E2E, LibrariesBreakingTheFunctionAbiAreRefused) {
  struct Case {
    const char *library;
    const char *expected;
  } cases[] = {
      {RFAAS_E2E_V1_LIBRARY, "no function ABI version (rfaas_function_abi_version)"},
      {RFAAS_E2E_WRONG_ABI_LIBRARY, "function ABI version 1, this executor runs version 2"},
      {RFAAS_E2E_NO_FUNCTIONS_LIBRARY, "no functions exported: declare them with RFAAS_FUNCTION"},
      {RFAAS_E2E_MANGLED_LIBRARY, "function `_Z4echoPvjS_` is C++-mangled: declare it with "
                                  "RFAAS_FUNCTION or extern \"C\""},
  };
  rfaas::executor ex(device());
  for (const Case &c : cases) {
    SCOPED_TRACE(c.library);
    rfaas::allocation_options o = options();
    o.library = c.library;
    try {
      allocate(ex, o);
      ADD_FAILURE() << "allocated with " << c.library;
      ex.deallocate();
    } catch (const rfaas::Error &e) {
      EXPECT_EQ(e.where(), rfaas::phase::code) << e.what();
      EXPECT_EQ(e.code(), rfaas::status::library_invalid) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << e.what();
    }
    EXPECT_FALSE(ex.allocated());
  }
}

TEST_F(E2E, ClientKilledMidLease) {
  // A spare executor (forked ahead, waiting for an allocation) is neither
  // left behind nor the baseline: it may become the helper's executor.
  const std::vector<pid_t> baseline = rfaas::e2e::busy_descendants_of(g.manager.pid());
  const size_t log_before = full_log("manager.log").size();
  Process helper({g.helper, g.devices, g.device, g.address, g.library}, g.workdir + "/helper.log");
  std::string line = helper.wait_for_line("allocated", 30s);
  ASSERT_NE(line, "") << "the helper client did not allocate; its stderr:\n"
                      << log_tail("helper.log") << "\nmanager log:\n"
                      << manager_log();
  // The helper's allocation is the first one the manager logged after the
  // helper started: "allocation <id>: ..., client <address>, executor pid <pid>".
  // (Telling it from the processes under the manager is not reliable: the
  // spare executor that takes it may have been busy starting up, and so in
  // the baseline.)
  std::string id, client;
  pid_t executor = 0;
  {
    const std::string log = full_log("manager.log").substr(log_before);
    const std::string mark = ", executor pid ";
    size_t at = log.find(mark);
    size_t from = at == std::string::npos ? at : log.rfind("allocation ", at);
    if (from != std::string::npos) {
      id = log.substr(from + 11, log.find(':', from) - from - 11);
      size_t c = log.rfind(", client ", at);
      if (c != std::string::npos && c > from)
        client = log.substr(c + 9, at - c - 9);
      executor = static_cast<pid_t>(std::atol(log.c_str() + at + mark.size()));
    }
  }
  ASSERT_NE(id, "") << "no allocation line for the helper; manager log:\n" << manager_log();
  ASSERT_NE(client, "") << "the allocation line names no client; manager log:\n" << manager_log();
  ASSERT_GT(executor, 0) << "the allocation line names no executor; manager log:\n"
                         << manager_log();
  const std::vector<pid_t> executors{executor};
  ASSERT_TRUE(rfaas::e2e::alive(executor)) << "executor " << executor << " is not running";

  helper.kill_now(); // SIGKILL: no Shutdown, no close: the network must tell
  const auto killed = std::chrono::steady_clock::now();
  // The manager notices the closed connection and reaps the executor; poll
  // /proc until it is gone (bounded: the manager's own grace is 2 s).
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  auto any_alive = [&] {
    return std::any_of(executors.begin(), executors.end(), rfaas::e2e::alive);
  };
  while (any_alive() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(any_alive()) << "executor left behind after its client died";
  // The allocation of the killed client ends: the manager terminated the
  // executor when it saw the client go, or the executor found the client
  // unreachable and exited.
  const std::string ended = "allocation " + id + " ended: executor ";
  while (!manager_log_has(ended) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(manager_log_has(ended)) << "allocation " << id << " never ended; manager log:\n"
                                      << manager_log();
  const long long ended_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::steady_clock::now() - killed)
                                 .count();
  std::printf("ClientKilledMidLease: the allocation ended %lld ms after its client was killed\n",
              ended_ms);
  // docs/protocol.md: within about 4 s where the fabric reports no dead
  // peer (a probe after 1 s of silence, answered or posted within 3 s).
  // tcp;ofi_rxm took 6.2 s while a worker's post to the dead client could
  // wait for room for the default post deadline (5 s).
  EXPECT_LT(ended_ms, 5500) << "manager log:\n" << manager_log();
  if (manager_log_has(ended + "exited: its client was unreachable"))
    std::printf("ClientKilledMidLease: the executor found its client unreachable before the "
                "manager did\n");
  // The manager's own link to the dead client ends too: it saw the
  // disconnect itself, or it dropped the link when the executor reported the
  // client unreachable (a fabric with no dead-peer report, or a lost
  // disconnect request).
  const std::string disconnected = "client " + client + " disconnected";
  const std::string dropped = "client " + client + ": its executor could not reach it; dropping it";
  while (!manager_log_has(disconnected) && !manager_log_has(dropped) &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  EXPECT_TRUE(manager_log_has(disconnected) || manager_log_has(dropped))
      << "the manager kept the dead client's (" << client << ") link; manager log:\n"
      << manager_log();
  // Nothing new is left under the manager (no zombie, no orphan).
  for (pid_t p : rfaas::e2e::busy_descendants_of(g.manager.pid()))
    EXPECT_NE(std::find(baseline.begin(), baseline.end(), p), baseline.end())
        << "process " << p << " left under the manager";
  // And it still serves.
  rfaas::executor ex(device());
  allocate(ex, options());
  std::vector<uint8_t> in(8, 1), out(8);
  ASSERT_RESULT(ex.execute("echo", in, out));
}

TEST_F(E2E, SpareExecutorTakesTheNextAllocation) {
  // The zygote keeps executor.pool (1 in the shipped configuration)
  // executors pre-started, on every provider, or says that it gave up.
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  bool spare = false, none_kept = false;
  while (!spare && !none_kept && std::chrono::steady_clock::now() < deadline) {
    for (pid_t p : rfaas::e2e::descendants_of(g.manager.pid()))
      spare = spare || rfaas::e2e::process_name(p) == rfaas::e2e::kSpareExecutorName;
    none_kept = manager_log_has("no executor pool");
    if (!spare && !none_kept)
      std::this_thread::sleep_for(10ms);
  }
  ASSERT_FALSE(none_kept) << "the zygote gave up its executor pool; manager log:\n"
                          << manager_log();
  ASSERT_TRUE(spare) << "no pooled executor under the manager; manager log:\n" << manager_log();
  // A pooled executor found above may still be entering its sandbox (the
  // pool refills after each allocation of the tests before); the allocation
  // then gets a fresh fork. One of a few allocations must take it.
  std::string log;
  size_t at = std::string::npos;
  const std::string mark = ", executor pid ";
  bool pooled = false;
  for (int attempt = 0; attempt < 4 && !pooled; ++attempt) {
    const size_t log_before = full_log("manager.log").size();
    rfaas::executor ex(device());
    allocate(ex, options());
    std::vector<uint8_t> in(8, 1), out(8);
    ASSERT_RESULT(ex.execute("echo", in, out));
    ex.deallocate();
    log = full_log("manager.log").substr(log_before);
    at = log.find(mark);
    ASSERT_NE(at, std::string::npos) << "no allocation line; manager log:\n" << manager_log();
    pooled =
        log.compare(log.find_first_not_of("0123456789", at + mark.size()), 9, " (pooled)") == 0;
    if (!pooled)
      std::printf("SpareExecutorTakesTheNextAllocation: allocation %d got a fresh fork\n", attempt);
  }
  EXPECT_TRUE(pooled) << "no allocation took the pooled executor; manager log:\n" << manager_log();
  // The manager names the zygote's child: the executor itself, or with the
  // namespaces sandbox the process in between (executor-box), whose child
  // the executor was.
  const pid_t pid = static_cast<pid_t>(std::atol(log.c_str() + at + mark.size()));
  EXPECT_GT(pid, 0);
}

TEST_F(E2E, VersionMismatchIsAnswered) {
  // Version 3 is the protocol before the slot headers lost their Header.
  Process probe({g.probe, g.devices, g.device, g.address, "3"}, g.workdir + "/probe.log");
  std::string line = probe.wait_for_line("probe: ", 30s);
  EXPECT_NE(line.find("reply version_mismatch version 8"), std::string::npos)
      << "probe said: \"" << line << "\"";
  probe.stop();
}

TEST_F(E2E, SetupErrorsCarryContext) {
  rfaas::executor ex(device());
  // Nobody listens there (the manager's address: reachable on every device,
  // unlike 127.0.0.1 on verbs, so the refusal itself is what is tested).
  // An opaque endpoint name has no port to change: that part needs host:port.
  if (g.server.port == 0) {
    std::printf("SetupErrorsCarryContext: the manager's address %s is an opaque name; the "
                "refused-connection part of this case is left out\n",
                g.address.c_str());
  } else {
    rfaas::server nobody{"nobody", g.server.address, 1};
    try {
      ex.allocate(nobody, options());
      FAIL() << "allocated from nobody";
    } catch (const rfaas::Error &e) {
      EXPECT_EQ(e.where(), rfaas::phase::connect) << e.what();
      EXPECT_EQ(e.manager(), g.server.address + ":1");
    }
  }
  // More cores than the manager has.
  try {
    ex.allocate(g.server, options(200)); // must fail: not retried
    FAIL() << "allocated 200 cores";
  } catch (const rfaas::Error &e) {
    EXPECT_EQ(e.where(), rfaas::phase::allocation) << e.what();
    EXPECT_EQ(e.code(), rfaas::status::resources_unavailable) << e.what();
  }
  // Not a shared library: the executor refuses it.
  rfaas::allocation_options o = options();
  o.library = g.devices; // a JSON file
  try {
    ex.allocate(g.server, o); // must fail: not retried
    FAIL() << "allocated with a JSON file as library";
  } catch (const rfaas::Error &e) {
    EXPECT_EQ(e.where(), rfaas::phase::code) << e.what();
    EXPECT_EQ(e.code(), rfaas::status::library_invalid) << e.what();
  }
  EXPECT_FALSE(ex.allocated());
  allocate(ex, options());
  std::vector<uint8_t> in(8, 1), out(8);
  ASSERT_RESULT(ex.execute("echo", in, out));
}

} // namespace

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--device" && i + 1 < argc)
      g.device = argv[++i];
    else if (a == "--devices" && i + 1 < argc)
      g.devices = argv[++i];
    else if (a == "--manager-device" && i + 1 < argc)
      g.manager_device = argv[++i];
    else if (a == "--host" && i + 1 < argc)
      g.host = argv[++i];
    else if (a == "--no-host")
      g.host.clear();
    else if (a == "--expect-masked" && i + 1 < argc)
      g.expect_masked = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: %s [--device NAME] [--devices FILE] [--manager-device NAME] "
                   "[--host IP | --no-host] [--expect-masked CAP,...] [gtest flags]\n",
                   argv[0]);
      return 2;
    }
  }
  if (g.manager_device.empty())
    g.manager_device = g.device;
  char tmpl[] = "/tmp/rfaas-e2e.XXXXXX";
  if (!mkdtemp(tmpl)) {
    std::perror("mkdtemp");
    return 1;
  }
  g.workdir = tmpl;
  // --no-host: the manager listens where its device's provider puts it (a
  // device without an ip_address prints an opaque ofi: name).
  std::vector<std::string> manager_args{
      g.manager_bin, "--config", g.manager_config, "--skip-resource-manager",
      "--devices",   g.devices,  "--device",       g.manager_device,
      "--port",      "0",        "--cores",        cpu_list()};
  if (!g.host.empty()) {
    manager_args.push_back("--host");
    manager_args.push_back(g.host);
  }
  g.manager = Process(manager_args, g.workdir + "/manager.log");
  std::string ready = g.manager.wait_for_line("listening on", 60s);
  if (ready.empty()) {
    std::fprintf(stderr, "rfaas_e2e_tests: the executor manager did not start on %s (%s):\n%s\n",
                 g.manager_device.c_str(), g.host.c_str(), manager_log().c_str());
    return 1;
  }
  g.address = ready.substr(ready.rfind(' ') + 1);
  g.server = rfaas::server::parse(g.address);
  g.server.name = "e2e";
  std::printf("rfaas_e2e_tests: client on %s, manager on %s at %s (pid %d)\n", g.device.c_str(),
              g.manager_device.c_str(), g.address.c_str(), static_cast<int>(g.manager.pid()));
  int rc = RUN_ALL_TESTS();
  int status = g.manager.stop();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "rfaas_e2e_tests: the manager did not stop cleanly (status %d)\n%s\n",
                 status, manager_log().c_str());
    rc = 1;
  }
  std::string cleanup = "rm -rf '" + g.workdir + "'";
  if (rc == 0 && std::system(cleanup.c_str()) != 0)
    std::fprintf(stderr, "could not remove %s\n", g.workdir.c_str());
  return rc;
}
