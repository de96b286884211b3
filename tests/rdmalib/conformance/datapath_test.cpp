// The data path on every provider configuration x capability mask: setup with
// private data, messages, batched receives, RMA, atomics and close, each with
// the bytes verified.
#include "common.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <set>

#include <poll.h>

using namespace rdmalib;
using namespace conformance;

namespace {

class DataPath : public ParamFixture {};

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

/// Drive `ops`' progress until `ok()` holds or the deadline passes. Used where
/// the contract promises delivery but not ordering against a later message
/// (plain write, atomics): the target keeps progressing while it looks.
template <class Pred> bool eventually(Operations ops, Pred ok) {
  auto deadline = Clock::now() + kDeadline;
  while (!ok()) {
    if (Clock::now() > deadline)
      return false;
    Completion c;
    WaitResult r = ops.wait(Queue::Recv, &c, 1, 1);
    if (r.count)
      ADD_FAILURE() << "unexpected " << op_name(c.kind) << " completion while waiting for data";
  }
  return true;
}

// ---- capabilities -----------------------------------------------------------------

TEST_P(DataPath, CapabilitiesMatchProviderAndMask) {
  const Capabilities &c = caps();
  SCOPED_TRACE(c.describe());
  EXPECT_EQ(server_fabric_->mask().disabled, mask_.disabled);
  EXPECT_EQ(c.describe(), client_fabric_->capabilities().describe())
      << "two fabrics opened from one configuration disagree";
  EXPECT_FALSE(server_fabric_->describe().empty());
  EXPECT_NE(server_fabric_->describe().find(server_fabric_->provider()), std::string::npos)
      << "the start-up line must name the provider: " << server_fabric_->describe();

  const auto &p = GetParam().provider;
  if (p.endpoint == EndpointPreference::Connected) {
    EXPECT_EQ(c.endpoint, EndpointType::Connected);
  }
  if (p.endpoint == EndpointPreference::ReliableDatagram) {
    EXPECT_EQ(c.endpoint, EndpointType::ReliableDatagram);
  }

  for (CapabilityBit bit : {CapRemoteCqData, CapAtomics, CapVirtualAddressing, CapWaitFd, CapInline,
                            CapSharedEndpoint}) {
    bool have = capability_value(c, bit);
    if (mask_.disables(bit)) {
      EXPECT_FALSE(have) << capability_name(bit) << " is masked off but still reported";
    } else if (!(expect_.unchecked & bit)) {
      EXPECT_EQ(have, !expected_off(expect_, mask_, bit))
          << capability_name(bit) << " on " << server_fabric_->provider()
          << ": expectation table says " << (expect_.absent & bit ? "absent" : "present") << " ("
          << expect_.why << ")";
    }
  }
  if (!c.remote_cq_data) {
    EXPECT_TRUE(c.write_consumes_receive)
        << "write_imm is emulated with a message, so it must consume a receive";
    EXPECT_GE(c.notify_message_size, 1u);
    EXPECT_LE(c.notify_message_size, 64u) << "the notification should stay small";
  }
  EXPECT_GE(c.max_private_data, 32u) << "the contract promises >= 32 bytes of private data";
  EXPECT_GE(c.max_message, 1 * MiB) << "the suite (and rFaaS) moves 1 MiB messages";
  EXPECT_GE(c.mr_key_size, 1u);
  EXPECT_LE(c.mr_key_size, 8u);
}

// ---- connection setup ------------------------------------------------------------------

TEST_P(DataPath, ConnectCarriesPrivateDataBothWays) {
  Listener listener(*server_fabric_, Address{server_ip(), 0});
  Address where = listener.address();
  if (opaque_addresses()) {
    EXPECT_TRUE(where.opaque()) << "a device without an ip_address names endpoints opaquely: "
                                << where.to_string();
    EXPECT_EQ(Address::parse(where.to_string()), where) << "the printable form round-trips";
  } else {
    EXPECT_NE(where.port, 0) << "the listener must report the chosen port, never 0";
    EXPECT_EQ(where.host, server_ip());
  }

  // The largest private data the fabric promises, but at least 32 bytes.
  size_t n = std::max<size_t>(32, std::min<size_t>(caps().max_private_data, 200));
  auto request = pattern_vector(n, 1);
  auto reply = pattern_vector(n - 1, 2); // different sizes catch a length mix-up
  Connection server, client;
  run_both(
      [&] {
        ConnectionRequest r = listener.next_request(kDeadline);
        EXPECT_EQ(r.private_data(), request) << "request private data at the server";
        server = r.accept(reply.data(), reply.size(), kDeadline);
        EXPECT_EQ(server.peer_private_data(), request);
      },
      [&] {
        client =
            Connection::connect(*client_fabric_, where, request.data(), request.size(), kDeadline);
        EXPECT_EQ(client.peer_private_data(), reply) << "reply private data at the client";
      });
  EXPECT_TRUE(server.is_open());
  // An empty Connection has no fabric or address to check.
  ASSERT_TRUE(client.is_open()) << "connect to " << where.to_string() << " failed";
  EXPECT_EQ(client.remote_address(), where);
  EXPECT_EQ(&client.fabric(), client_fabric_.get());
  EXPECT_TRUE(client.ops().valid());
}

// ---- messages ------------------------------------------------------------------------------

TEST_P(DataPath, SendRecvSizesBothWays) {
  const size_t sizes[] = {1, 64, 4 * KiB, 64 * KiB, 1 * MiB};
  // Buffers first: they must outlive the connections (posted receives use them).
  Buffer<uint8_t> s_recv(*server_fabric_, MiB), s_send(*server_fabric_, MiB);
  Buffer<uint8_t> c_recv(*client_fabric_, MiB), c_send(*client_fabric_, MiB);
  Link k = make_link(*server_fabric_, *client_fabric_);
  ASSERT_FALSE(HasFailure());
  attach_if_needed(k.server, s_recv.region());
  attach_if_needed(k.server, s_send.region());
  attach_if_needed(k.client, c_recv.region());
  attach_if_needed(k.client, c_send.region());
  Event server_ready;

  run_both(
      [&] {
        Operations ops = k.server.ops();
        for (size_t i = 0; i < std::size(sizes); ++i) {
          size_t n = sizes[i];
          std::string what = "server, message of " + std::to_string(n) + " B";
          // Receives of at least 16 bytes (an RDM goodbye must fit).
          ASSERT_EQ(ops.post_recv(s_recv.local_bytes(0, std::max<size_t>(n, 16)), 100 + i),
                    Status::Ok)
              << what << ": " << ops.last_error();
          if (i == 0)
            server_ready.post();
          auto c = wait_one(ops, Queue::Recv, what);
          ASSERT_TRUE(c);
          ASSERT_EQ(c->status, Status::Ok) << what << ": " << ops.last_error();
          EXPECT_EQ(c->kind, OpKind::Recv) << what;
          EXPECT_EQ(c->context, 100 + i) << what;
          EXPECT_EQ(c->length, n) << what;
          EXPECT_EQ(pattern_mismatch(s_recv.data(), n, 1000 + i), -1)
              << what << ": first differing byte";
          // Echo something different so the client checks fresh bytes.
          fill_pattern(s_send.data(), n, 2000 + i);
          ASSERT_EQ(ops.send(s_send.local_bytes(0, n), 200 + i), Status::Ok) << ops.last_error();
          ASSERT_TRUE(expect_completion(ops, Queue::Send, OpKind::Send, 200 + i, what + " reply"));
        }
      },
      [&] {
        Operations ops = k.client.ops();
        ASSERT_TRUE(server_ready.wait()) << "server never posted its first receive";
        for (size_t i = 0; i < std::size(sizes); ++i) {
          size_t n = sizes[i];
          std::string what = "client, message of " + std::to_string(n) + " B";
          ASSERT_EQ(ops.post_recv(c_recv.local_bytes(0, std::max<size_t>(n, 16)), 300 + i),
                    Status::Ok)
              << ops.last_error();
          fill_pattern(c_send.data(), n, 1000 + i);
          ASSERT_EQ(ops.send(c_send.local_bytes(0, n), 400 + i), Status::Ok) << ops.last_error();
          ASSERT_TRUE(expect_completion(ops, Queue::Send, OpKind::Send, 400 + i, what));
          auto c = wait_one(ops, Queue::Recv, what + " reply");
          ASSERT_TRUE(c);
          ASSERT_EQ(c->status, Status::Ok) << what << ": " << ops.last_error();
          EXPECT_EQ(c->kind, OpKind::Recv);
          EXPECT_EQ(c->context, 300 + i);
          EXPECT_EQ(c->length, n);
          EXPECT_EQ(pattern_mismatch(c_recv.data(), n, 2000 + i), -1)
              << what << " reply: first differing byte";
        }
      });
}

// On a shared endpoint a message reaches its link only when the provider
// names its sender, which it can only once the receiving process has inserted
// the sender's address: the accepting side's first send, posted right after
// accept, must not overtake that (tcp;ofi_rxm reported such a message as from
// nobody and the check dropped it, now and then). Many links, each with the
// server sending at once, so that the race has its chances.
TEST_P(DataPath, SendRightAfterAcceptReachesTheClient) {
  if (!caps().shared_endpoint)
    GTEST_SKIP() << "links have endpoints of their own here (no shared_endpoint): no sender is "
                    "checked, so nothing can be lost this way";
  constexpr size_t kLinks = 24, kLen = 32;
  Buffer<uint8_t> s_send(*server_fabric_, kLinks * kLen);
  Buffer<uint8_t> c_recv(*client_fabric_, kLinks * kLen);
  Listener listener(*server_fabric_, Address{server_ip(), 0});
  const Address where = listener.address();
  std::vector<Connection> server(kLinks), client(kLinks);
  for (size_t i = 0; i < kLinks; ++i) {
    const std::string what = "link " + std::to_string(i);
    run_both(
        [&] {
          server[i] = listener.accept(nullptr, 0, kDeadline);
          attach_if_needed(server[i], s_send.region());
          Operations ops = server[i].ops();
          fill_pattern(s_send.data() + i * kLen, kLen, 500 + i);
          ASSERT_EQ(ops.send(s_send.local_bytes(i * kLen, kLen), i), Status::Ok)
              << what << ": " << ops.last_error();
          ASSERT_TRUE(expect_completion(ops, Queue::Send, OpKind::Send, i, what + ", server"));
        },
        [&] {
          client[i] = Connection::connect(*client_fabric_, where, nullptr, 0, kDeadline);
          attach_if_needed(client[i], c_recv.region());
          Operations ops = client[i].ops();
          ASSERT_EQ(ops.post_recv(c_recv.local_bytes(i * kLen, kLen), i), Status::Ok)
              << what << ": " << ops.last_error();
          auto c = wait_one(ops, Queue::Recv, what + ", client");
          ASSERT_TRUE(c) << what << ": the server's first message was lost";
          ASSERT_EQ(c->status, Status::Ok) << what << ": " << ops.last_error();
          EXPECT_EQ(c->length, kLen) << what;
          EXPECT_EQ(pattern_mismatch(c_recv.data() + i * kLen, kLen, 500 + i), -1) << what;
        });
    ASSERT_FALSE(HasFailure()) << what;
  }
}

TEST_P(DataPath, InlineSendBufferIsReusableAtOnce) {
  size_t max_inline = caps().max_inline;
  if (mask_.disables(CapInline)) {
    EXPECT_EQ(max_inline, 0u) << "inline is masked off";
  }
  // With inline, the source may be overwritten right after the post; without,
  // PostInline must be ignored and the send still work.
  size_t n = max_inline ? std::min<size_t>(max_inline, 64) : 32;
  // Buffers first: they must outlive the connections (posted receives use them).
  Buffer<uint8_t> s_recv(*server_fabric_, 64), c_send(*client_fabric_, 64);
  Link k = make_link(*server_fabric_, *client_fabric_);
  ASSERT_FALSE(HasFailure());
  attach_if_needed(k.server, s_recv.region());
  attach_if_needed(k.client, c_send.region());
  Event ready;
  run_both(
      [&] {
        Operations ops = k.server.ops();
        ASSERT_EQ(ops.post_recv(s_recv.local_bytes(0, 64), 1), Status::Ok) << ops.last_error();
        ready.post();
        auto c = wait_one(ops, Queue::Recv, "inline message");
        ASSERT_TRUE(c);
        ASSERT_EQ(c->status, Status::Ok) << ops.last_error();
        EXPECT_EQ(c->length, n);
        EXPECT_EQ(pattern_mismatch(s_recv.data(), n, 5), -1)
            << "inline payload changed after the post (first differing byte)";
      },
      [&] {
        Operations ops = k.client.ops();
        ASSERT_TRUE(ready.wait());
        fill_pattern(c_send.data(), n, 5);
        ASSERT_EQ(ops.send(c_send.local_bytes(0, n), 2, PostInline), Status::Ok)
            << ops.last_error();
        if (max_inline >= n)
          std::memset(c_send.data(), 0xEE, n);
        expect_completion(ops, Queue::Send, OpKind::Send, 2, "inline send");
      });
}

TEST_P(DataPath, BatchedPostRecvThenManySends) {
  constexpr size_t kCount = 64, kSlot = 256;
  ConnectionOptions opts;
  opts.recv_depth = 2 * kCount;
  opts.send_depth = 16; // fewer than kCount: posts must retry with progress, not fail
  // Buffers first: they must outlive the connections (posted receives use them).
  Buffer<uint8_t> s_recv(*server_fabric_, kCount * kSlot), c_send(*client_fabric_, kCount * kSlot);
  Link k = make_link(*server_fabric_, *client_fabric_, opts);
  ASSERT_FALSE(HasFailure());
  attach_if_needed(k.server, s_recv.region());
  attach_if_needed(k.client, c_send.region());
  auto length = [](size_t i) { return 16 + (i * 37) % (kSlot - 16); };
  Event ready;

  run_both(
      [&] {
        Operations ops = k.server.ops();
        std::vector<LocalRef> refs;
        std::vector<uint64_t> ctxs;
        for (size_t i = 0; i < kCount; ++i) {
          refs.push_back(s_recv.local_bytes(i * kSlot, kSlot));
          ctxs.push_back(1000 + i);
        }
        size_t posted = 0;
        ASSERT_EQ(ops.post_recv(refs.data(), ctxs.data(), kCount, &posted), Status::Ok)
            << ops.last_error();
        EXPECT_EQ(posted, kCount);
        ready.post();
        std::set<uint64_t> seen_ctx, seen_seq;
        size_t in_order = 0;
        while (seen_ctx.size() < kCount) {
          Completion batch[16];
          WaitResult r = ops.wait(Queue::Recv, batch, 16, kDeadlineMs);
          ASSERT_GT(r.count, 0u) << "after " << seen_ctx.size() << " of " << kCount
                                 << " messages: " << to_string(r.status) << " " << ops.last_error();
          for (size_t j = 0; j < r.count; ++j) {
            const Completion &c = batch[j];
            ASSERT_EQ(c.status, Status::Ok) << ops.last_error();
            ASSERT_EQ(c.kind, OpKind::Recv);
            ASSERT_GE(c.context, 1000u);
            ASSERT_LT(c.context, 1000u + kCount);
            EXPECT_TRUE(seen_ctx.insert(c.context).second) << "context " << c.context << " twice";
            const uint8_t *slot = s_recv.data() + (c.context - 1000) * kSlot;
            uint64_t seq;
            std::memcpy(&seq, slot, 8);
            ASSERT_LT(seq, kCount) << "garbage in slot of context " << c.context;
            EXPECT_TRUE(seen_seq.insert(seq).second) << "message " << seq << " twice";
            EXPECT_EQ(c.length, length(seq)) << "message " << seq;
            EXPECT_EQ(pattern_mismatch(slot + 8, length(seq) - 8, 300 + seq), -1)
                << "message " << seq << ": first differing byte";
            in_order += (seq == c.context - 1000);
          }
        }
        RecordProperty("messages_in_posting_order", static_cast<int>(in_order));
        expect_quiet(ops, Queue::Recv, 50, "after the batch");
      },
      [&] {
        Operations ops = k.client.ops();
        ASSERT_TRUE(ready.wait());
        size_t done = 0;
        std::set<uint64_t> ctx;
        for (size_t i = 0; i < kCount; ++i) {
          uint8_t *slot = c_send.data() + i * kSlot;
          uint64_t seq = i;
          std::memcpy(slot, &seq, 8);
          fill_pattern(slot + 8, length(i) - 8, 300 + i);
          Status st = ops.send(c_send.local_bytes(i * kSlot, length(i)), 5000 + i);
          ASSERT_EQ(st, Status::Ok) << "send " << i << ": " << ops.last_error();
          // Reap what is already done; posts beyond send_depth retry internally.
          Completion batch[16];
          size_t n = ops.poll(Queue::Send, batch, 16);
          for (size_t j = 0; j < n; ++j) {
            EXPECT_EQ(batch[j].status, Status::Ok);
            ctx.insert(batch[j].context);
          }
          done += n;
        }
        while (done < kCount) {
          Completion batch[16];
          WaitResult r = ops.wait(Queue::Send, batch, 16, kDeadlineMs);
          ASSERT_GT(r.count, 0u) << done << " of " << kCount
                                 << " send completions: " << to_string(r.status) << " "
                                 << ops.last_error();
          for (size_t j = 0; j < r.count; ++j) {
            EXPECT_EQ(batch[j].status, Status::Ok);
            EXPECT_EQ(batch[j].kind, OpKind::Send);
            ctx.insert(batch[j].context);
          }
          done += r.count;
        }
        EXPECT_EQ(done, kCount);
        EXPECT_EQ(ctx.size(), kCount) << "every send completes once with its own context";
      });
}

// ---- RMA ------------------------------------------------------------------------------------

struct Chunk {
  size_t offset, len;
};
// Unaligned offsets and a large tail, inside a 1 MiB region.
const Chunk kChunks[] = {{0, 1}, {8, 64}, {4096 + 17, 4 * KiB}, {64 * KiB, 960 * KiB}};

TEST_P(DataPath, WriteDeliversBytes) {
  // Buffers first: they must outlive the connections (posted receives use them).
  Buffer<uint8_t> region(*server_fabric_, MiB), done_buf(*server_fabric_, 64);
  Buffer<uint8_t> src(*client_fabric_, MiB), note(*client_fabric_, 16);
  Link k = make_link(*server_fabric_, *client_fabric_);
  ASSERT_FALSE(HasFailure());
  attach_if_needed(k.server, region.region());
  attach_if_needed(k.server, done_buf.region());
  attach_if_needed(k.client, src.region());
  attach_if_needed(k.client, note.region());
  fill_pattern(src.data(), MiB, 31);
  RemoteBuffer target = region.remote();
  Event ready;

  run_both(
      [&] {
        Operations ops = k.server.ops();
        ASSERT_EQ(ops.post_recv(done_buf.local_bytes(0, 64), 1), Status::Ok);
        ready.post();
        // Waiting for the "done" message drives progress while the writes land.
        ASSERT_TRUE(expect_completion(ops, Queue::Recv, OpKind::Recv, 1, "done message"));
        auto all_there = [&] {
          for (const auto &ch : kChunks)
            if (std::memcmp(region.data() + ch.offset, src.data() + ch.offset, ch.len) != 0)
              return false;
          return true;
        };
        EXPECT_TRUE(eventually(ops, all_there)) << "written bytes never became visible";
        for (const auto &ch : kChunks)
          EXPECT_EQ(std::memcmp(region.data() + ch.offset, src.data() + ch.offset, ch.len), 0)
              << "chunk at offset " << ch.offset << " (" << ch.len << " B)";
        // Untouched bytes stay zero (no write beyond its length).
        EXPECT_EQ(region[1], 0);
        EXPECT_EQ(region[72], 0);
        EXPECT_EQ(region[4096 + 16], 0);
        EXPECT_EQ(region[4096 + 17 + 4 * KiB], 0);
      },
      [&] {
        Operations ops = k.client.ops();
        ASSERT_TRUE(ready.wait());
        for (size_t i = 0; i < std::size(kChunks); ++i) {
          const Chunk &ch = kChunks[i];
          ASSERT_EQ(ops.write(src.local_bytes(ch.offset, ch.len), target, ch.offset, 10 + i),
                    Status::Ok)
              << ops.last_error();
          ASSERT_TRUE(expect_completion(ops, Queue::Send, OpKind::Write, 10 + i,
                                        "write of " + std::to_string(ch.len) + " B"));
        }
        ASSERT_EQ(ops.send(note.local_bytes(0, 16), 99), Status::Ok);
        expect_completion(ops, Queue::Send, OpKind::Send, 99, "done message");
      });
}

TEST_P(DataPath, WriteImmDeliversImmediateAndBytes) {
  const Capabilities &c = caps();
  constexpr size_t kRecvs = 16;
  size_t slot = std::max<size_t>(64, c.notify_message_size);
  // Buffers first: they must outlive the connections (posted receives use them).
  Buffer<uint8_t> region(*server_fabric_, MiB), recvs(*server_fabric_, kRecvs * slot);
  Buffer<uint8_t> src(*client_fabric_, MiB);
  Link k = make_link(*server_fabric_, *client_fabric_);
  ASSERT_FALSE(HasFailure());
  attach_if_needed(k.server, region.region());
  attach_if_needed(k.server, recvs.region());
  attach_if_needed(k.client, src.region());
  fill_pattern(src.data(), MiB, 41);
  RemoteBuffer target = region.remote();
  const uint32_t imms[] = {0u, 0xFFFFFFFFu, 0x12345678u, 0xA5A5A5A5u};
  static_assert(std::size(imms) == std::size(kChunks));
  Event ready;

  run_both(
      [&] {
        Operations ops = k.server.ops();
        // Receives stay posted throughout: required when write_imm consumes one
        // (emulation, verbs), harmless otherwise.
        for (size_t i = 0; i < kRecvs; ++i)
          ASSERT_EQ(ops.post_recv(recvs.local_bytes(i * slot, slot), 700 + i), Status::Ok)
              << ops.last_error();
        ready.post();
        for (size_t i = 0; i < std::size(kChunks); ++i) {
          std::string what = "notification " + std::to_string(i);
          auto comp = wait_one(ops, Queue::Recv, what);
          ASSERT_TRUE(comp);
          ASSERT_EQ(comp->status, Status::Ok) << what << ": " << ops.last_error();
          ASSERT_EQ(comp->kind, OpKind::RemoteWriteImm)
              << what << ": a write_imm must surface as RemoteWriteImm, not "
              << op_name(comp->kind);
          EXPECT_EQ(comp->imm, imms[i]) << what << ": immediate (in posting order)";
          // The contract: the data is visible when the notification arrives.
          const Chunk &ch = kChunks[i];
          EXPECT_EQ(std::memcmp(region.data() + ch.offset, src.data() + ch.offset, ch.len), 0)
              << what << ": bytes not visible at the notification (chunk at " << ch.offset << ", "
              << ch.len << " B)";
          if (c.write_consumes_receive) {
            // The notification used one of our receives: its context says which,
            // so it can be posted again.
            ASSERT_GE(comp->context, 700u) << what << ": context is not a posted receive's";
            ASSERT_LT(comp->context, 700u + kRecvs)
                << what << ": context is not a posted receive's";
            size_t idx = comp->context - 700;
            ASSERT_EQ(ops.post_recv(recvs.local_bytes(idx * slot, slot), comp->context),
                      Status::Ok);
          }
        }
        expect_quiet(ops, Queue::Recv, 100, "after the notifications");
      },
      [&] {
        Operations ops = k.client.ops();
        ASSERT_TRUE(ready.wait());
        for (size_t i = 0; i < std::size(kChunks); ++i) {
          const Chunk &ch = kChunks[i];
          ASSERT_EQ(
              ops.write_imm(src.local_bytes(ch.offset, ch.len), target, ch.offset, imms[i], 20 + i),
              Status::Ok)
              << ops.last_error();
          ASSERT_TRUE(expect_completion(ops, Queue::Send, OpKind::WriteImm, 20 + i,
                                        "write_imm of " + std::to_string(ch.len) + " B"));
        }
        // One completion per post, even when a notification message rides along.
        expect_quiet(ops, Queue::Send, 100, "after the write_imm completions");
        // The sender never sees its own write as remote (sockets quirk).
        Completion stray;
        EXPECT_EQ(ops.poll(Queue::Recv, &stray, 1), 0u)
            << "the sender got a " << op_name(stray.kind) << " completion on its recv queue";
      });
}

TEST_P(DataPath, ReadFetchesBytes) {
  // Buffers first: they must outlive the connections (posted receives use them).
  Buffer<uint8_t> region(*server_fabric_, MiB), done_buf(*server_fabric_, 64);
  Buffer<uint8_t> dst(*client_fabric_, MiB), note(*client_fabric_, 16);
  Link k = make_link(*server_fabric_, *client_fabric_);
  ASSERT_FALSE(HasFailure());
  attach_if_needed(k.server, region.region());
  attach_if_needed(k.server, done_buf.region());
  attach_if_needed(k.client, dst.region());
  attach_if_needed(k.client, note.region());
  fill_pattern(region.data(), MiB, 51);
  RemoteBuffer source = region.remote();
  Event ready;

  run_both(
      [&] {
        Operations ops = k.server.ops();
        ASSERT_EQ(ops.post_recv(done_buf.local_bytes(0, 64), 1), Status::Ok);
        ready.post();
        // The target only waits: with manual progress this wait serves the reads.
        expect_completion(ops, Queue::Recv, OpKind::Recv, 1, "done message");
      },
      [&] {
        Operations ops = k.client.ops();
        ASSERT_TRUE(ready.wait());
        for (size_t i = 0; i < std::size(kChunks); ++i) {
          const Chunk &ch = kChunks[i];
          // Read into a different local offset than the remote one.
          size_t local = (ch.offset + 8) % (MiB - ch.len);
          std::memset(dst.data() + local, 0, ch.len);
          ASSERT_EQ(ops.read(dst.local_bytes(local, ch.len), source, ch.offset, 30 + i), Status::Ok)
              << ops.last_error();
          ASSERT_TRUE(expect_completion(ops, Queue::Send, OpKind::Read, 30 + i,
                                        "read of " + std::to_string(ch.len) + " B"));
          EXPECT_EQ(pattern_mismatch(dst.data() + local, ch.len, 51, ch.offset), -1)
              << "read of " << ch.len << " B at remote offset " << ch.offset
              << ": first differing byte";
        }
        ASSERT_EQ(ops.send(note.local_bytes(0, 16), 99), Status::Ok);
        expect_completion(ops, Queue::Send, OpKind::Send, 99, "done message");
      });
}

// ---- atomics -------------------------------------------------------------------------------

/// When atomics are off: the absence must be expected (table or mask), and the
/// calls must say Unsupported without posting anything. Returns true if the test
/// should skip.
bool atomics_absent(const Capabilities &c, const Expectation &e, CapabilityMask mask,
                    const std::string &provider, Connection &conn, const LocalRef &result,
                    const RemoteBuffer &target) {
  if (c.atomics)
    return false;
  EXPECT_TRUE(expected_off(e, mask, CapAtomics))
      << "atomics are off on " << provider << " but neither the mask nor the expectation table ("
      << e.why << ") says so";
  Operations ops = conn.ops();
  EXPECT_EQ(ops.fetch_add(result, target, 0, 1, 1), Status::Unsupported)
      << "fetch_add without atomics must return Unsupported";
  EXPECT_EQ(ops.compare_swap(result, target, 0, 0, 1, 2), Status::Unsupported)
      << "compare_swap without atomics must return Unsupported";
  Completion stray;
  EXPECT_EQ(ops.poll(Queue::Send, &stray, 1), 0u) << "an Unsupported call posted something";
  return true;
}

TEST_P(DataPath, FetchAdd) {
  // Buffers first: they must outlive the connections (posted receives use them).
  Buffer<uint64_t> words(*server_fabric_, 8), done_buf(*server_fabric_, 8);
  Buffer<uint64_t> result(*client_fabric_, 1), note(*client_fabric_, 2);
  Link k = make_link(*server_fabric_, *client_fabric_);
  ASSERT_FALSE(HasFailure());
  attach_if_needed(k.server, words.region());
  attach_if_needed(k.server, done_buf.region());
  attach_if_needed(k.client, result.region());
  attach_if_needed(k.client, note.region());
  for (size_t i = 0; i < 8; ++i)
    words[i] = 0x1111111111111111ull * i;
  words[1] = 100;
  RemoteBuffer target = words.remote();
  if (atomics_absent(caps(), expect_, mask_, server_fabric_->provider(), k.client, result.local(),
                     target))
    GTEST_SKIP() << "provider " << server_fabric_->provider()
                 << " lacks atomics (capability 'atomics' off: "
                 << (mask_.disables(CapAtomics) ? "masked" : expect_.why)
                 << "); fetch_add returned Unsupported as required";

  const uint64_t big = 0xFFFFFFFF00000000ull;
  Event ready;
  run_both(
      [&] {
        Operations ops = k.server.ops();
        ASSERT_EQ(ops.post_recv(done_buf.local(), 1), Status::Ok);
        ready.post();
        ASSERT_TRUE(expect_completion(ops, Queue::Recv, OpKind::Recv, 1, "done message"));
        EXPECT_TRUE(eventually(ops, [&] { return words[1] == 105 + big; }))
            << "target word is " << words[1] << ", expected " << 105 + big;
        for (size_t i = 0; i < 8; ++i)
          if (i != 1) {
            EXPECT_EQ(words[i], 0x1111111111111111ull * i) << "neighbour word " << i << " changed";
          }
      },
      [&] {
        Operations ops = k.client.ops();
        ASSERT_TRUE(ready.wait());
        ASSERT_EQ(ops.fetch_add(result.local(), target, 8, 5, 41), Status::Ok) << ops.last_error();
        ASSERT_TRUE(expect_completion(ops, Queue::Send, OpKind::FetchAdd, 41, "fetch_add +5"));
        EXPECT_EQ(result[0], 100u) << "fetch_add returns the previous value";
        ASSERT_EQ(ops.fetch_add(result.local(), target, 8, big, 42), Status::Ok);
        ASSERT_TRUE(expect_completion(ops, Queue::Send, OpKind::FetchAdd, 42, "fetch_add +big"));
        EXPECT_EQ(result[0], 105u);
        ASSERT_EQ(ops.send(note.local(), 99), Status::Ok);
        expect_completion(ops, Queue::Send, OpKind::Send, 99, "done message");
      });
}

TEST_P(DataPath, CompareSwap) {
  // Buffers first: they must outlive the connections (posted receives use them).
  Buffer<uint64_t> words(*server_fabric_, 8), done_buf(*server_fabric_, 8);
  Buffer<uint64_t> result(*client_fabric_, 1), note(*client_fabric_, 2);
  Link k = make_link(*server_fabric_, *client_fabric_);
  ASSERT_FALSE(HasFailure());
  attach_if_needed(k.server, words.region());
  attach_if_needed(k.server, done_buf.region());
  attach_if_needed(k.client, result.region());
  attach_if_needed(k.client, note.region());
  for (size_t i = 0; i < 8; ++i)
    words[i] = 0x0101010101010101ull * i;
  words[3] = 42;
  RemoteBuffer target = words.remote();
  if (atomics_absent(caps(), expect_, mask_, server_fabric_->provider(), k.client, result.local(),
                     target))
    GTEST_SKIP() << "provider " << server_fabric_->provider()
                 << " lacks atomics (capability 'atomics' off: "
                 << (mask_.disables(CapAtomics) ? "masked" : expect_.why)
                 << "); compare_swap returned Unsupported as required";

  Event ready;
  run_both(
      [&] {
        Operations ops = k.server.ops();
        ASSERT_EQ(ops.post_recv(done_buf.local(), 1), Status::Ok);
        ready.post();
        ASSERT_TRUE(expect_completion(ops, Queue::Recv, OpKind::Recv, 1, "done message"));
        EXPECT_TRUE(eventually(ops, [&] { return words[3] == 7; }))
            << "target word is " << words[3] << ", expected 7";
        for (size_t i = 0; i < 8; ++i)
          if (i != 3) {
            EXPECT_EQ(words[i], 0x0101010101010101ull * i) << "neighbour word " << i << " changed";
          }
      },
      [&] {
        Operations ops = k.client.ops();
        ASSERT_TRUE(ready.wait());
        // Matching compare: swaps.
        ASSERT_EQ(ops.compare_swap(result.local(), target, 24, 42, 7, 51), Status::Ok)
            << ops.last_error();
        ASSERT_TRUE(expect_completion(ops, Queue::Send, OpKind::CompareSwap, 51, "cas 42->7"));
        EXPECT_EQ(result[0], 42u) << "compare_swap returns the previous value";
        // Stale compare: no swap, returns the current value.
        ASSERT_EQ(ops.compare_swap(result.local(), target, 24, 42, 9, 52), Status::Ok);
        ASSERT_TRUE(expect_completion(ops, Queue::Send, OpKind::CompareSwap, 52, "cas stale"));
        EXPECT_EQ(result[0], 7u) << "a failed compare_swap returns the current value";
        ASSERT_EQ(ops.send(note.local(), 99), Status::Ok);
        expect_completion(ops, Queue::Send, OpKind::Send, 99, "done message");
      });
}

// ---- close ---------------------------------------------------------------------------------

TEST_P(DataPath, PeerCloseIsReported) {
  // Buffers first: they must outlive the connections (posted receives use them).
  Buffer<uint8_t> recvs(*server_fabric_, 4 * 64), out(*server_fabric_, 64);
  Link k = make_link(*server_fabric_, *client_fabric_);
  ASSERT_FALSE(HasFailure());
  attach_if_needed(k.server, recvs.region());
  attach_if_needed(k.server, out.region());
  Operations ops = k.server.ops();
  for (size_t i = 0; i < 4; ++i)
    ASSERT_EQ(ops.post_recv(recvs.local_bytes(i * 64, 64), 10 + i), Status::Ok);
  Event closed;

  run_both(
      [&] {
        ASSERT_TRUE(closed.wait());
        auto start = Clock::now();
        bool saw_closed = false;
        while (!saw_closed && Clock::now() - start < kDeadline) {
          Completion c;
          WaitResult r = ops.wait(Queue::Recv, &c, 1, kDeadlineMs);
          if (r.count == 0) {
            EXPECT_EQ(r.status, Status::Closed)
                << "wait after the peer closed: " << ops.last_error();
            saw_closed = true;
            break;
          }
          // Flushed receives or the goodbye may come first; a message may not.
          bool closing = c.kind == OpKind::PeerClosed || c.status == Status::Closed ||
                         c.status == Status::Cancelled;
          EXPECT_TRUE(closing) << "unexpected " << op_name(c.kind) << " completion, status "
                               << to_string(c.status);
          if (!closing)
            break;
        }
        EXPECT_TRUE(saw_closed) << "wait() never returned Closed after the peer closed";
        EXPECT_LT(Clock::now() - start, kDeadline + kSlack);
        // And it keeps saying so, at once.
        Completion c;
        auto t0 = Clock::now();
        WaitResult again = ops.wait(Queue::Recv, &c, 1, 5000);
        EXPECT_EQ(again.status, Status::Closed);
        EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(2500))
            << "wait on a closed connection should return Closed without waiting out its timeout";
        // Sending on it fails or completes with an error; it never hangs.
        t0 = Clock::now();
        Status st = ops.send(out.local_bytes(0, 16), 77);
        if (st == Status::Ok) {
          WaitResult w = ops.wait(Queue::Send, &c, 1, 5000);
          if (w.count)
            RecordProperty("send_after_close", to_string(c.status));
        }
        EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(5000) + kSlack);
      },
      [&] {
        k.client.close();
        EXPECT_FALSE(k.client.is_open());
        k.client.close(); // idempotent
        closed.post();
      });
}

// A link closed right after it was made: the peer's goodbye can reach the
// other end before that end holds the closer's address (a shared endpoint:
// the server's goodbye before the client inserted the server's address, or
// before the server has the client's confirmation), where a check of each
// message's source cannot tell it from a stranger's. It must still end the
// link there, promptly, not at some timeout. Several links, since the
// goodbye overtakes the handshake's end only sometimes.
void wait_for_end(Operations ops, const std::string &what) {
  const auto until = Clock::now() + kDeadline;
  for (;;) {
    Completion c;
    WaitResult r = ops.wait(Queue::Recv, &c, 1, kDeadlineMs);
    if (r.count == 0) {
      EXPECT_EQ(r.status, Status::Closed) << what << ": the peer's close was not seen ("
                                          << to_string(r.status) << "): " << ops.last_error();
      return;
    }
    if (c.kind == OpKind::PeerClosed)
      return;
    // The receive flushed by the end (connected endpoints) may come first.
    ASSERT_TRUE(c.status == Status::Closed || c.status == Status::Cancelled)
        << what << ": " << op_name(c.kind) << " completion, status " << to_string(c.status)
        << " instead of the peer's close";
    ASSERT_LT(Clock::now(), until) << what << ": no end of the link";
  }
}

void close_right_after_setup(Fabric &server_fabric, Fabric &client_fabric, bool server_closes) {
  constexpr size_t links = 8;
  Buffer<uint8_t> s_recv(server_fabric, links * 64), c_recv(client_fabric, links * 64);
  Listener listener(server_fabric, Address{server_ip(), 0});
  const Address where = listener.address();
  for (size_t i = 0; i < links; ++i) {
    const std::string what = "link " + std::to_string(i);
    Connection server, client;
    // One end closes at once, the other waits for the close.
    auto end = [&](Connection &c, Buffer<uint8_t> &recv, bool closes, const char *side) {
      if (closes) {
        c.close();
        return;
      }
      attach_if_needed(c, recv.region());
      Operations ops = c.ops();
      ASSERT_EQ(ops.post_recv(recv.local_bytes(i * 64, 64), i), Status::Ok) << ops.last_error();
      wait_for_end(ops, what + ", " + side);
    };
    run_both(
        [&] {
          server = listener.accept(nullptr, 0, kDeadline);
          end(server, s_recv, server_closes, "server");
        },
        [&] {
          client = Connection::connect(client_fabric, where, nullptr, 0, kDeadline);
          end(client, c_recv, !server_closes, "client");
        });
    ASSERT_FALSE(testing::Test::HasFailure()) << what;
  }
}

TEST_P(DataPath, CloseRightAfterAcceptReachesTheClient) {
  if (!caps().shared_endpoint)
    GTEST_SKIP() << "links have endpoints of their own here (no shared_endpoint): no sender "
                    "is checked, so a goodbye cannot be taken for a stranger's message";
  close_right_after_setup(*server_fabric_, *client_fabric_, true);
}

TEST_P(DataPath, CloseRightAfterConnectReachesTheServer) {
  if (!caps().shared_endpoint)
    GTEST_SKIP() << "links have endpoints of their own here (no shared_endpoint): no sender "
                    "is checked, so a goodbye cannot be taken for a stranger's message";
  close_right_after_setup(*server_fabric_, *client_fabric_, false);
}

INSTANTIATE_TEST_SUITE_P(Providers, DataPath, testing::ValuesIn(params(all_masks())), param_name);

} // namespace

// ---- sleeping on many links ----------------------------------------------------------

// Connection::wait_fd() and Operations::arm(): a server that sleeps in
// poll(2) on the descriptor wakes for each message, armed again after each.
TEST_P(DataPath, WaitFdWakesForEachMessage) {
  Buffer<uint8_t> s_recv(*server_fabric_, 2 * 64), c_send(*client_fabric_, 64);
  Link k = make_link(*server_fabric_, *client_fabric_);
  ASSERT_FALSE(HasFailure());
  attach_if_needed(k.server, s_recv.region());
  attach_if_needed(k.client, c_send.region());
  const int fd = k.server.wait_fd();
  if (fd < 0)
    GTEST_SKIP() << "no wait descriptor on this fabric (Capabilities::wait_fd " << caps().wait_fd
                 << ", or a provider wait object that is no descriptor): callers poll it";
  constexpr int kMessages = 3;
  Event armed[kMessages];
  run_both(
      [&] {
        Operations ops = k.server.ops();
        for (int i = 0; i < kMessages; ++i) {
          ASSERT_EQ(ops.post_recv(s_recv.local_bytes((i % 2) * 64, 64), 10 + i), Status::Ok)
              << ops.last_error();
          // Poll until arm() says a sleep is safe (it may ask for a few polls).
          auto deadline = Clock::now() + kDeadline;
          Completion c;
          while (!ops.arm()) {
            ASSERT_LT(Clock::now(), deadline) << "arm() never allowed a sleep";
            ASSERT_EQ(ops.poll(Queue::Recv, &c, 1), 0u) << "a message before the peer sent one";
            ops.poll(Queue::Send, &c, 1);
          }
          armed[i].post();
          pollfd pfd{fd, POLLIN, 0};
          ASSERT_EQ(::poll(&pfd, 1, kDeadlineMs), 1)
              << "the descriptor did not wake for message " << i;
          auto got = wait_one(ops, Queue::Recv, "message after the wake-up");
          ASSERT_TRUE(got);
          EXPECT_EQ(got->status, Status::Ok) << ops.last_error();
          EXPECT_EQ(got->context, uint64_t(10 + i));
        }
      },
      [&] {
        Operations ops = k.client.ops();
        for (int i = 0; i < kMessages; ++i) {
          ASSERT_TRUE(armed[i].wait());
          fill_pattern(c_send.data(), 32, i);
          ASSERT_EQ(ops.send(c_send.local_bytes(0, 32), 100 + i), Status::Ok) << ops.last_error();
          expect_completion(ops, Queue::Send, OpKind::Send, 100 + i, "send");
        }
      });
}
