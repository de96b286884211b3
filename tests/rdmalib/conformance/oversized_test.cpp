// A message longer than the receive it lands in (operations.hpp, "Oversized
// messages"): the receiver's receive fails and its link ends, the sender never
// hangs, and the receiving fabric keeps serving new links. On shm 1.17 this
// used to wedge the receiving process inside the provider for good
// (Quirks::truncation_hangs_receiver).
#include "common.hpp"

#include <cstring>

using namespace rdmalib;
using namespace conformance;

namespace {

class Oversized : public ProviderFixture {
protected:
  /// Send `size` bytes over a fresh link whose server side posted two
  /// receives of `posted` bytes, and check both sides.
  void overrun(size_t posted, size_t size) {
    SCOPED_TRACE("message of " + std::to_string(size) + " bytes into receives of " +
                 std::to_string(posted));
    Buffer<uint8_t> recvs(*server_fabric_, 2 * posted);
    Buffer<uint8_t> big(*client_fabric_, size);
    std::memset(big.data(), 0x5a, size);
    Link k = make_link(*server_fabric_, *client_fabric_);
    ASSERT_FALSE(HasFailure());
    attach_if_needed(k.server, recvs.region());
    attach_if_needed(k.client, big.region());
    Operations sops = k.server.ops(), cops = k.client.ops();
    for (size_t i = 0; i < 2; ++i)
      ASSERT_EQ(sops.post_recv(recvs.local_bytes(i * posted, posted), 10 + i), Status::Ok);

    // The server closes only after the sender's call returned: shm reaches an
    // in-process peer through that peer's own memory, which its close frees
    // (Quirks::in_process_peer_must_be_alive); across processes it need not wait.
    Event sent, send_done, server_closed;
    run_both(
        [&] {
          ASSERT_TRUE(sent.wait());
          auto start = Clock::now();
          Completion c;
          WaitResult r = sops.wait(Queue::Recv, &c, 1, kDeadlineMs);
          EXPECT_LT(Clock::now() - start, kDeadline + kSlack);
          if (r.count) {
            // The receive fails (or the link reports its end); a message
            // never arrives as if it had fit.
            EXPECT_TRUE(c.status != Status::Ok || c.kind == OpKind::PeerClosed)
                << "an oversized message completed a receive: " << op_name(c.kind) << ", "
                << c.length << " bytes";
            EXPECT_LE(c.length, posted);
            RecordProperty("receiver_status", to_string(c.status));
          } else {
            EXPECT_EQ(r.status, Status::Closed) << "no failed receive and no close within "
                                                << kDeadlineMs << " ms: " << sops.last_error();
          }
          // The link is over: nothing more is posted or waited for on it.
          EXPECT_EQ(sops.post_recv(recvs.local_bytes(0, posted), 99), Status::Closed)
              << sops.last_error();
          // Receives still posted may come back flushed (never as messages);
          // then wait() says Closed, at once.
          auto t0 = Clock::now();
          WaitResult w;
          for (int i = 0; i < 4; ++i) {
            w = sops.wait(Queue::Recv, &c, 1, 5000);
            if (!w.count)
              break;
            EXPECT_NE(c.status, Status::Ok) << "a message arrived on an ended link";
          }
          EXPECT_EQ(w.status, Status::Closed);
          EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(2500));
          EXPECT_TRUE(send_done.wait());
          k.server.close();
          server_closed.post();
        },
        [&] {
          auto t0 = Clock::now();
          Status st = cops.send(big.local_bytes(0, size), 7);
          sent.post();
          Completion c;
          if (st == Status::Ok) {
            WaitResult w = cops.wait(Queue::Send, &c, 1, kDeadlineMs);
            if (w.count)
              RecordProperty("sender_status", to_string(c.status));
          } else {
            RecordProperty("sender_post", to_string(st));
          }
          EXPECT_LT(Clock::now() - t0, kDeadline + kSlack) << "the sender hung";
          send_done.post();
          // After the receiver closed, the sender's side ends too (or at
          // least returns from every call within its deadline).
          ASSERT_TRUE(server_closed.wait());
          t0 = Clock::now();
          cops.wait(Queue::Recv, &c, 1, 2000);
          k.client.close();
          EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(2000) + kSlack)
              << "the sender hung after the receiver closed";
        });
  }

  /// The server's fabric still accepts a link and carries a message that fits.
  void still_serves() {
    Buffer<uint8_t> in(*server_fabric_, 64), out(*client_fabric_, 64);
    std::memset(out.data(), 0x33, 64);
    Link k = make_link(*server_fabric_, *client_fabric_);
    ASSERT_TRUE(k.server.is_open() && k.client.is_open());
    attach_if_needed(k.server, in.region());
    attach_if_needed(k.client, out.region());
    ASSERT_EQ(k.server.ops().post_recv(in.local_bytes(0, 64), 1), Status::Ok);
    run_both(
        [&] {
          auto c = wait_one(k.server.ops(), Queue::Recv, "a message after an oversized one");
          ASSERT_TRUE(c.has_value());
          EXPECT_EQ(c->status, Status::Ok);
          EXPECT_EQ(c->length, 64u);
          EXPECT_EQ(in.data()[63], 0x33);
        },
        [&] {
          ASSERT_EQ(k.client.ops().send(out.local_bytes(0, 64), 2), Status::Ok);
          expect_completion(k.client.ops(), Queue::Send, OpKind::Send, 2, "send after");
        });
    k.client.close();
    k.server.close();
  }
};

// Short (copied by the provider in one piece on most providers) and long
// (shm: cross-memory attach, longer than the overflow area rdmalib posts).
TEST_P(Oversized, ShortOverrunEndsOnlyThatLink) {
  overrun(256, 1024);
  still_serves();
}

TEST_P(Oversized, LongOverrunEndsOnlyThatLink) {
  overrun(256, 512 * 1024);
  still_serves();
}

INSTANTIATE_TEST_SUITE_P(Providers, Oversized, testing::ValuesIn(provider_configs()),
                         provider_name);

} // namespace
