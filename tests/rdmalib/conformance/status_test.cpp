// The Status rules of operations.hpp and the setup rules of connection.hpp /
// listener.hpp, which every backend and provider must follow alike:
// default-constructed and moved-from objects, bad arguments, full queues,
// closed links and deadlines.
#include "common.hpp"

#include <cstring>
#include <limits>

using namespace rdmalib;
using namespace conformance;

namespace {

/// Every data-path call of an Operations handle that is not attached to a
/// connection.
void expect_empty_handle(Operations ops) {
  EXPECT_FALSE(ops.valid());
  uint64_t word = 0;
  LocalRef buf{&word, sizeof word, nullptr};
  RemoteBuffer rb{0, 0, 64};
  EXPECT_EQ(ops.send(buf, 1), Status::InvalidArgument);
  EXPECT_EQ(ops.post_recv(buf, 2), Status::InvalidArgument);
  size_t posted = 7;
  uint64_t ctx = 3;
  EXPECT_EQ(ops.post_recv(&buf, &ctx, 1, &posted), Status::InvalidArgument);
  EXPECT_EQ(posted, 0u) << "post_recv must report how many it posted: none";
  EXPECT_EQ(ops.write(buf, rb, 0, 4), Status::InvalidArgument);
  EXPECT_EQ(ops.write_imm(buf, rb, 0, 9, 5), Status::InvalidArgument);
  EXPECT_EQ(ops.read(buf, rb, 0, 6), Status::InvalidArgument);
  EXPECT_EQ(ops.fetch_add(buf, rb, 0, 1, 7), Status::InvalidArgument);
  EXPECT_EQ(ops.compare_swap(buf, rb, 0, 1, 2, 8), Status::InvalidArgument);
  Completion c[2];
  EXPECT_EQ(ops.poll(Queue::Send, c, 2), 0u);
  EXPECT_EQ(ops.poll(Queue::Recv, c, 2), 0u);
  auto t0 = Clock::now();
  WaitResult w = ops.wait(Queue::Recv, c, 2, 5000);
  EXPECT_EQ(w.count, 0u);
  EXPECT_EQ(w.status, Status::InvalidArgument);
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(1000)) << "wait on nothing must not wait";
  ASSERT_NE(ops.last_error(), nullptr);
  EXPECT_GT(std::strlen(ops.last_error()), 0u);
}

// ---- objects without a backend ------------------------------------------------------------

TEST(StatusRules, DefaultOperationsAnswersInvalidArgument) { expect_empty_handle(Operations{}); }

TEST(StatusRules, DefaultConnectionIsClosedAndInert) {
  Connection c;
  EXPECT_FALSE(c.is_open());
  EXPECT_TRUE(c.peer_private_data().empty());
  EXPECT_EQ(c.remote_address(), Address{});
  expect_empty_handle(c.ops());
  c.close(); // a no-op, twice
  c.close();
  EXPECT_FALSE(c.is_open());
}

TEST(StatusRules, DefaultConnectionRequestCannotBeAccepted) {
  ConnectionRequest r;
  EXPECT_TRUE(r.private_data().empty());
  EXPECT_EQ(r.remote_address(), Address{});
  try {
    Connection c = r.accept(nullptr, 0, std::chrono::milliseconds(100));
    ADD_FAILURE() << "accept on an empty request succeeded";
  } catch (const Error &e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config) << e.what();
  }
  r.reject(); // a no-op
}

TEST(StatusRules, DefaultMemoryRegionIsInvalid) {
  MemoryRegion m;
  EXPECT_FALSE(m.valid());
  EXPECT_EQ(m.bytes(), 0u);
  EXPECT_EQ(m.remote().size, 0u);
  MemoryRegion moved(std::move(m));
  EXPECT_FALSE(moved.valid());
}

// ---- objects of a real fabric ----------------------------------------------------------------

class StatusRulesOnFabric : public ParamFixture {
protected:
  /// A link with small queues and a short post deadline.
  Link small_link(uint32_t send_depth, uint32_t recv_depth, std::chrono::milliseconds deadline) {
    ConnectionOptions o;
    o.send_depth = send_depth;
    o.recv_depth = recv_depth;
    o.post_deadline = deadline;
    return make_link(*server_fabric_, *client_fabric_, o);
  }
};

TEST_P(StatusRulesOnFabric, MovedFromObjectsAreInert) {
  Listener listener(*server_fabric_, Address{server_ip(), 0});
  Listener taken(std::move(listener));
  EXPECT_TRUE(taken.address().port != 0 || taken.address().opaque());
  EXPECT_EQ(listener.address(), Address{});
  EXPECT_EQ(listener.fd(), -1);
  try {
    listener.next_request(std::chrono::milliseconds(10));
    ADD_FAILURE() << "next_request on a moved-from listener returned";
  } catch (const Error &e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config) << e.what();
  }

  Buffer<uint8_t> buf(*server_fabric_, 64);
  Buffer<uint8_t> other(std::move(buf));
  EXPECT_TRUE(other.region().valid());
  EXPECT_FALSE(buf.region().valid());

  // A connection that is not open ignores attach(), however the fabric binds memory.
  Connection none;
  none.attach(other.region());

  // Registering nothing, or a null address, is refused with a clear error.
  try {
    MemoryRegion m(*server_fabric_, nullptr, 64);
    ADD_FAILURE() << "a region at a null address was registered";
  } catch (const Error &e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config) << e.what();
  }
}

TEST_P(StatusRulesOnFabric, BadArgumentsAreInvalidArgumentAndPostNothing) {
  Buffer<uint64_t> local(*client_fabric_, 8), target(*server_fabric_, 8);
  Link k = make_link(*server_fabric_, *client_fabric_);
  ASSERT_FALSE(HasFailure());
  attach_if_needed(k.client, local.region());
  attach_if_needed(k.server, target.region());
  Operations ops = k.client.ops();
  const RemoteBuffer rb = target.remote();
  ASSERT_EQ(rb.size, 64u);
  // Out of the remote buffer: past its end, or an offset beyond it.
  EXPECT_EQ(ops.write(local.local_bytes(0, 16), rb, 56, 1), Status::InvalidArgument);
  EXPECT_NE(std::string(ops.last_error()).find("exceeds the remote buffer"), std::string::npos)
      << ops.last_error();
  EXPECT_EQ(ops.write(local.local_bytes(0, 0), rb, 65, 2), Status::InvalidArgument);
  EXPECT_EQ(ops.write_imm(local.local_bytes(0, 16), rb, 60, 7, 3), Status::InvalidArgument);
  EXPECT_EQ(ops.read(local.local_bytes(0, 64), rb, 8, 4), Status::InvalidArgument);
  EXPECT_EQ(ops.write(local.local_bytes(0, 8), rb, std::numeric_limits<uint64_t>::max(), 5),
            Status::InvalidArgument);
  // A local buffer of some length at a null address.
  LocalRef null_buf{nullptr, 8, nullptr};
  EXPECT_EQ(ops.send(null_buf, 6), Status::InvalidArgument);
  EXPECT_EQ(ops.post_recv(null_buf, 7), Status::InvalidArgument);
  EXPECT_EQ(ops.post_recv(nullptr, nullptr, 2, nullptr), Status::InvalidArgument);
  // Longer than the fabric's largest transfer.
  const size_t max = caps().max_message;
  if (max < std::numeric_limits<size_t>::max()) {
    LocalRef huge{local.data(), max + 1, local.region().desc()};
    EXPECT_EQ(ops.send(huge, 8), Status::InvalidArgument) << "max_message " << max;
  }
  // Atomics: an unaligned target, a short result, or no atomics at all.
  Status unaligned = ops.fetch_add(local.local_bytes(0, 8), rb, 4, 1, 9);
  Status short_result = ops.compare_swap(local.local_bytes(0, 4), rb, 8, 0, 1, 10);
  Status outside = ops.fetch_add(local.local_bytes(0, 8), rb, 64, 1, 11);
  const Status expected = caps().atomics ? Status::InvalidArgument : Status::Unsupported;
  EXPECT_EQ(unaligned, expected);
  EXPECT_EQ(short_result, expected);
  EXPECT_EQ(outside, expected);
  // Nothing of that was posted: no completion comes back.
  Completion c;
  EXPECT_EQ(ops.poll(Queue::Send, &c, 0), 0u);
  EXPECT_EQ(ops.wait(Queue::Send, &c, 0, 10).status, Status::InvalidArgument);
  EXPECT_EQ(ops.wait(Queue::Send, nullptr, 1, 10).status, Status::InvalidArgument);
  expect_quiet(ops, Queue::Send, 100, "after refused posts");
  // The link still works.
  local[0] = 0x1122334455667788ull;
  ASSERT_EQ(ops.write(local.local_bytes(0, 8), rb, 56, 12), Status::Ok) << ops.last_error();
  EXPECT_TRUE(expect_completion(ops, Queue::Send, OpKind::Write, 12, "a valid write"));
}

TEST_P(StatusRulesOnFabric, FullSendQueueWaitsForRoomAndKeepsEveryCompletion) {
  // 32 sends through a 4-deep send queue without polling in between: each
  // post waits for room itself (Ok, never Again) and no completion is lost.
  const size_t n = 32, size = 32;
  Buffer<uint8_t> rx(*server_fabric_, n * size), tx(*client_fabric_, n * size);
  ConnectionOptions o;
  o.send_depth = 4;
  o.recv_depth = n;
  Link k = make_link(*server_fabric_, *client_fabric_, o);
  ASSERT_FALSE(HasFailure());
  attach_if_needed(k.server, rx.region());
  attach_if_needed(k.client, tx.region());
  Operations s = k.server.ops(), c = k.client.ops();
  std::vector<LocalRef> refs;
  std::vector<uint64_t> ctx;
  for (size_t i = 0; i < n; ++i) {
    refs.push_back(rx.local(i * size, size));
    ctx.push_back(1000 + i);
    std::memset(tx.data() + i * size, static_cast<int>(i), size);
  }
  size_t posted = 0;
  ASSERT_EQ(s.post_recv(refs.data(), ctx.data(), n, &posted), Status::Ok) << s.last_error();
  ASSERT_EQ(posted, n);
  run_both(
      [&] {
        for (size_t got = 0; got < n;) {
          Completion cs[8];
          WaitResult r = s.wait(Queue::Recv, cs, 8, kDeadlineMs);
          ASSERT_EQ(r.status, Status::Ok) << s.last_error();
          for (size_t i = 0; i < r.count; ++i) {
            ASSERT_EQ(cs[i].status, Status::Ok) << s.last_error();
            ASSERT_EQ(cs[i].length, size);
            size_t idx = cs[i].context - 1000;
            EXPECT_EQ(rx[idx * size], static_cast<uint8_t>(idx));
          }
          got += r.count;
        }
      },
      [&] {
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(c.send(tx.local(i * size, size), i), Status::Ok)
              << "send " << i << ": " << c.last_error();
        std::vector<bool> seen(n, false);
        for (size_t got = 0; got < n;) {
          Completion cs[8];
          WaitResult r = c.wait(Queue::Send, cs, 8, kDeadlineMs);
          ASSERT_EQ(r.status, Status::Ok) << c.last_error();
          for (size_t i = 0; i < r.count; ++i) {
            ASSERT_EQ(cs[i].status, Status::Ok);
            ASSERT_LT(cs[i].context, n);
            EXPECT_FALSE(seen[cs[i].context]) << "context " << cs[i].context << " twice";
            seen[cs[i].context] = true;
          }
          got += r.count;
        }
      });
}

TEST_P(StatusRulesOnFabric, FullReceiveQueueTimesOutAtThePostDeadline) {
  // recv_depth receives may be outstanding; one more waits for room until the
  // post deadline and is then Timeout (never Again), having posted nothing.
  const auto deadline = std::chrono::milliseconds(300);
  Buffer<uint8_t> rx(*server_fabric_, 8 * 64);
  Link k = small_link(4, 4, deadline);
  ASSERT_FALSE(HasFailure());
  attach_if_needed(k.server, rx.region());
  Operations s = k.server.ops();
  for (uint64_t i = 0; i < 4; ++i)
    ASSERT_EQ(s.post_recv(rx.local(i * 64, 64), i), Status::Ok) << s.last_error();
  auto t0 = Clock::now();
  Status st = s.post_recv(rx.local(4 * 64, 64), 4);
  auto took = Clock::now() - t0;
  EXPECT_EQ(st, Status::Timeout) << s.last_error();
  EXPECT_GE(took, deadline) << "the post gave up before its deadline";
  EXPECT_LT(took, deadline + kSlack) << "the post overran its deadline";
  // A batch stops at the same limit and says how far it got.
  std::vector<LocalRef> refs{rx.local(5 * 64, 64), rx.local(6 * 64, 64)};
  std::vector<uint64_t> ctx{5, 6};
  size_t posted = 9;
  EXPECT_EQ(s.post_recv(refs.data(), ctx.data(), 2, &posted), Status::Timeout);
  EXPECT_EQ(posted, 0u);
  // A shorter deadline set afterwards applies to the next post.
  const auto shorter = std::chrono::milliseconds(100);
  k.server.set_post_deadline(shorter);
  EXPECT_EQ(s.post_deadline(), shorter) << "the handle reads the connection's deadline";
  t0 = Clock::now();
  EXPECT_EQ(s.post_recv(rx.local(7 * 64, 64), 7), Status::Timeout) << s.last_error();
  took = Clock::now() - t0;
  EXPECT_GE(took, shorter) << "the post gave up before its new deadline";
  EXPECT_LT(took, deadline) << "the post kept the old deadline";
  // The same through the handle; a negative deadline is 0: one try.
  s.set_post_deadline(std::chrono::milliseconds(-5));
  EXPECT_EQ(s.post_deadline(), std::chrono::milliseconds(0));
  t0 = Clock::now();
  EXPECT_EQ(s.post_recv(rx.local(7 * 64, 64), 7), Status::Timeout) << s.last_error();
  EXPECT_LT(Clock::now() - t0, shorter) << "a post with no deadline left kept retrying";
  EXPECT_EQ(Operations().post_deadline(), std::chrono::milliseconds(0));
  s.set_post_deadline(deadline);
  // The link is intact: the first receive takes a message.
  Buffer<uint8_t> tx(*client_fabric_, 64);
  attach_if_needed(k.client, tx.region());
  std::memset(tx.data(), 0x42, 64);
  run_both(
      [&] {
        auto c = wait_one(s, Queue::Recv, "a message into the full receive queue");
        ASSERT_TRUE(c.has_value());
        EXPECT_EQ(c->status, Status::Ok) << s.last_error();
        EXPECT_EQ(c->kind, OpKind::Recv);
        EXPECT_LT(c->context, 4u);
      },
      [&] {
        ASSERT_EQ(k.client.ops().send(tx.local(0, 64), 1), Status::Ok);
        expect_completion(k.client.ops(), Queue::Send, OpKind::Send, 1, "send");
      });
}

TEST_P(StatusRulesOnFabric, ClosedLinksAnswerClosed) {
  Buffer<uint8_t> rx(*server_fabric_, 4 * 64), tx(*client_fabric_, 64);
  Link k = make_link(*server_fabric_, *client_fabric_);
  ASSERT_FALSE(HasFailure());
  attach_if_needed(k.server, rx.region());
  attach_if_needed(k.client, tx.region());
  Operations s = k.server.ops(), c = k.client.ops();
  for (uint64_t i = 0; i < 2; ++i)
    ASSERT_EQ(s.post_recv(rx.local(i * 64, 64), i), Status::Ok);
  RemoteBuffer rb = rx.remote();

  // Closed here: every post is Closed, and waiting returns Closed at once.
  k.client.close();
  EXPECT_FALSE(k.client.is_open());
  EXPECT_EQ(c.send(tx.local(0, 16), 1), Status::Closed);
  EXPECT_EQ(c.post_recv(tx.local(0, 16), 2), Status::Closed);
  EXPECT_EQ(c.write(tx.local(0, 16), rb, 0, 3), Status::Closed);
  EXPECT_EQ(c.write_imm(tx.local(0, 16), rb, 0, 1, 4), Status::Closed);
  EXPECT_EQ(c.read(tx.local(0, 16), rb, 0, 5), Status::Closed);
  EXPECT_EQ(c.fetch_add(tx.local(0, 8), rb, 0, 1, 6), Status::Closed);
  Completion done;
  auto t0 = Clock::now();
  EXPECT_EQ(c.wait(Queue::Recv, &done, 1, 5000).status, Status::Closed);
  EXPECT_EQ(c.wait(Queue::Send, &done, 1, 5000).status, Status::Closed);
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(2500));

  // Closed there: the end is reported exactly once as PeerClosed on the
  // Recv queue (flushed receives may come too, never as messages), then
  // every wait returns Closed at once and every post returns Closed.
  size_t peer_closed = 0;
  auto start = Clock::now();
  for (;;) {
    Completion r;
    WaitResult w = s.wait(Queue::Recv, &r, 1, kDeadlineMs);
    if (w.count == 0) {
      EXPECT_EQ(w.status, Status::Closed) << s.last_error();
      break;
    }
    EXPECT_NE(r.status, Status::Ok) << "a message arrived on a closed link";
    if (r.kind == OpKind::PeerClosed) {
      EXPECT_EQ(r.status, Status::Closed);
      ++peer_closed;
    }
    ASSERT_LT(Clock::now() - start, kDeadline + kSlack);
  }
  EXPECT_EQ(peer_closed, 1u) << "the end of the link must be reported once";
  t0 = Clock::now();
  EXPECT_EQ(s.wait(Queue::Recv, &done, 1, 5000).status, Status::Closed);
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(2500));
  EXPECT_FALSE(k.server.is_open());
  EXPECT_EQ(s.send(rx.local(0, 16), 7), Status::Closed);
  EXPECT_EQ(s.post_recv(rx.local(2 * 64, 64), 8), Status::Closed);
}

TEST_P(StatusRulesOnFabric, DeadlinesAreKept) {
  Link k = make_link(*server_fabric_, *client_fabric_);
  ASSERT_FALSE(HasFailure());
  Operations s = k.server.ops();
  Completion c;
  // Zero: one look, then Timeout.
  auto t0 = Clock::now();
  WaitResult w = s.wait(Queue::Recv, &c, 1, 0);
  EXPECT_EQ(w.status, Status::Timeout);
  EXPECT_EQ(w.count, 0u);
  EXPECT_LT(Clock::now() - t0, kSlack);
  // A deadline is waited out, and not much longer.
  t0 = Clock::now();
  w = s.wait(Queue::Recv, &c, 1, 300);
  auto took = Clock::now() - t0;
  EXPECT_EQ(w.status, Status::Timeout);
  EXPECT_GE(took, std::chrono::milliseconds(300));
  EXPECT_LT(took, std::chrono::milliseconds(300) + kSlack);
  // A listener with nobody connecting: Error(Timeout) naming its address.
  Listener listener(*server_fabric_, Address{server_ip(), 0});
  t0 = Clock::now();
  try {
    listener.next_request(std::chrono::milliseconds(200));
    ADD_FAILURE() << "a connection request came from nowhere";
  } catch (const Error &e) {
    EXPECT_EQ(e.kind(), ErrorKind::Timeout) << e.what();
    EXPECT_NE(std::string(e.what()).find(listener.address().to_string()), std::string::npos)
        << e.what();
  }
  took = Clock::now() - t0;
  EXPECT_GE(took, std::chrono::milliseconds(200));
  EXPECT_LT(took, std::chrono::milliseconds(200) + kSlack);
}

TEST_P(StatusRulesOnFabric, ARequestIsAnsweredOnce) {
  Listener listener(*server_fabric_, Address{server_ip(), 0});
  Address where = listener.address();
  auto pd = pattern_vector(32, 21);
  run_both(
      [&] {
        ConnectionRequest r = listener.next_request(kDeadline);
        EXPECT_TRUE(!r.remote_address().host.empty() || r.remote_address().opaque())
            << "where the request came from";
        // Too much private data: refused, and the request is still unanswered.
        std::vector<uint8_t> big(caps().max_private_data + 1, 1);
        try {
          r.accept(big.data(), big.size(), kDeadline);
          ADD_FAILURE() << "accept with " << big.size() << " bytes of private data succeeded";
        } catch (const Error &e) {
          EXPECT_EQ(e.kind(), ErrorKind::Config) << e.what();
        }
        Connection c = r.accept(pd.data(), pd.size(), kDeadline);
        EXPECT_TRUE(c.is_open());
        r.reject(); // answered already: a no-op
        try {
          r.accept(pd.data(), pd.size(), kDeadline);
          ADD_FAILURE() << "a request was accepted twice";
        } catch (const Error &e) {
          EXPECT_EQ(e.kind(), ErrorKind::Config) << e.what();
        }
        EXPECT_TRUE(c.is_open());
      },
      [&] {
        Connection c = Connection::connect(*client_fabric_, where, pd.data(), pd.size(), kDeadline);
        EXPECT_TRUE(c.is_open());
        EXPECT_EQ(c.peer_private_data(), pd);
      });
}

INSTANTIATE_TEST_SUITE_P(Providers, StatusRulesOnFabric, testing::ValuesIn(params(process_masks())),
                         param_name);

} // namespace
