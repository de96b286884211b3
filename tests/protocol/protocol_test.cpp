// Wire protocol: exact byte layout, round trips of every message, and rejection
// of everything a peer could get wrong (magic, version, type, lengths, limits).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "protocol/protocol.hpp"

namespace p = rfaas::protocol;

namespace {

// ---- helpers ------------------------------------------------------------------------

// Walks a message's fields() and checks that each one sits at the offset the
// encoder will write it to, so fields() lists every member in layout order.
struct OffsetChecker {
  const char *base;
  size_t expected = 0;
  std::vector<std::string> errors;

  template <class T> void operator()(const T &v) {
    size_t actual = static_cast<size_t>(reinterpret_cast<const char *>(&v) - base);
    if (actual != expected)
      errors.push_back("field at " + std::to_string(actual) + " listed where " +
                       std::to_string(expected) + " was expected");
    if constexpr (std::is_integral<T>::value || std::is_enum<T>::value || std::is_array<T>::value ||
                  p::detail::is_reserved<T>::value || std::is_same<T, p::Token>::value) {
      expected += sizeof(T);
    } else if constexpr (std::is_same<T, rdmalib::RemoteBuffer>::value) {
      (*this)(v.addr);
      (*this)(v.key);
      (*this)(v.size);
    } else {
      T::fields(v, *this);
    }
  }
};

template <class M> std::vector<std::string> layout_errors() {
  M m{};
  OffsetChecker c{reinterpret_cast<const char *>(&m), 0, {}};
  M::fields(static_cast<const M &>(m), c);
  if (c.expected != sizeof(M))
    c.errors.push_back("fields() cover " + std::to_string(c.expected) + " of " +
                       std::to_string(sizeof(M)) + " bytes");
  return c.errors;
}

uint64_t le64(const uint8_t *b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | b[i];
  return v;
}
uint32_t le32(const uint8_t *b) { return b[0] | b[1] << 8 | b[2] << 16 | uint32_t(b[3]) << 24; }
uint16_t le16(const uint8_t *b) { return static_cast<uint16_t>(b[0] | b[1] << 8); }

void put16(uint8_t *b, uint16_t v) {
  b[0] = static_cast<uint8_t>(v);
  b[1] = static_cast<uint8_t>(v >> 8);
}
void put32(uint8_t *b, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    b[i] = static_cast<uint8_t>(v >> (8 * i));
}

template <class M> std::vector<uint8_t> bytes_of(const M &m) {
  p::WireResult r;
  auto b = p::to_bytes(m, &r);
  EXPECT_TRUE(r.ok()) << p::describe(r);
  EXPECT_EQ(r.size, sizeof(M));
  return b;
}

// encode -> decode -> encode gives the same bytes, and decode reports the size.
template <class M> M round_trip(const M &m) {
  std::vector<uint8_t> first = bytes_of(m);
  M back{};
  p::WireResult r = p::decode(first.data(), first.size(), back);
  EXPECT_TRUE(r.ok()) << p::describe(r);
  EXPECT_EQ(r.size, sizeof(M));
  EXPECT_EQ(back.header.magic, p::kMagic);
  EXPECT_EQ(back.header.version, p::kVersion);
  EXPECT_EQ(back.header.type, M::kType);
  EXPECT_EQ(bytes_of(back), first);
  return back;
}

p::Token token_with(uint8_t seed) {
  p::Token t;
  for (size_t i = 0; i < p::kTokenSize; ++i)
    t.bytes[i] = static_cast<uint8_t>(seed + 17 * i);
  return t;
}

rdmalib::RemoteBuffer remote(uint64_t addr, uint64_t key, uint64_t size) {
  rdmalib::RemoteBuffer b;
  b.addr = addr;
  b.key = key;
  b.size = size;
  return b;
}

p::BufferDescriptor descriptor(uint32_t worker, uint32_t slots, uint32_t slot_size) {
  p::BufferDescriptor d;
  d.buffer =
      remote(0x7f0000001000ull + worker * 0x10000ull, 0xabc0 + worker, uint64_t(slots) * slot_size);
  d.worker = worker;
  d.slots = slots;
  d.slot_size = slot_size;
  return d;
}

p::AllocationRequest allocation_request(uint32_t cores) {
  p::AllocationRequest r;
  r.cores = cores;
  r.memory_mib = 2048;
  r.hot_timeout_ms = -1;
  r.input_slots = 4;
  r.input_slot_size = 4096;
  r.client_port = 10123;
  r.library_size = 123456;
  r.library_checksum = 0x1122334455667788ull;
  EXPECT_TRUE(p::set_text(r.client_host, "fe80::1%eth0"));
  return r;
}

std::vector<p::BufferDescriptor> results_for(const p::AllocationRequest &r) {
  std::vector<p::BufferDescriptor> v;
  for (uint32_t i = 0; i < r.cores; ++i)
    v.push_back(descriptor(i, r.input_slots, 8192));
  return v;
}

std::vector<uint8_t> encoded_request(const p::AllocationRequest &r,
                                     const std::vector<p::BufferDescriptor> &results) {
  std::vector<uint8_t> b(p::allocation_request_size(r.cores));
  p::WireResult w = p::encode(r, results, b.data(), b.size());
  EXPECT_TRUE(w.ok()) << p::describe(w);
  EXPECT_EQ(w.size, b.size());
  return b;
}

p::InvocationHeader invocation(uint32_t id, uint32_t payload, uint16_t slot) {
  p::InvocationHeader h;
  h.invocation_id = id;
  h.function = p::function_hash("echo");
  h.payload_size = payload;
  h.slot = slot;
  return h;
}

} // namespace

// ---- layout ---------------------------------------------------------------------------

template <class M> class MessageLayout : public ::testing::Test {};
using AllMessages =
    ::testing::Types<p::ClientHello, p::ExecutorHello, p::WorkerHello, p::ConnectReply,
                     p::AllocationRequest, p::AllocationResponse, p::BufferAdvertisement,
                     p::CodeHeader, p::Ready, p::InvocationHeader, p::ResultTarget, p::ResultHeader,
                     p::Accounting, p::Shutdown>;
TYPED_TEST_SUITE(MessageLayout, AllMessages);

TYPED_TEST(MessageLayout, FieldsListedInLayoutOrderWithoutGaps) {
  auto errors = layout_errors<TypeParam>();
  for (const auto &e : errors)
    ADD_FAILURE() << TypeParam::kName << ": " << e;
}

// Every message but the slot-resident ones, which travel on a link whose
// version the hellos settled.
template <class M> class HeaderMessage : public ::testing::Test {};
using HeaderMessages =
    ::testing::Types<p::ClientHello, p::ExecutorHello, p::WorkerHello, p::ConnectReply,
                     p::AllocationRequest, p::AllocationResponse, p::BufferAdvertisement,
                     p::CodeHeader, p::Ready, p::Accounting, p::Shutdown>;
TYPED_TEST_SUITE(HeaderMessage, HeaderMessages);

TYPED_TEST(HeaderMessage, HeaderCarriesMagicVersionAndType) {
  TypeParam m{};
  std::vector<uint8_t> b(p::kMaxAllocationRequestSize);
  p::WireResult r;
  if constexpr (std::is_same<TypeParam, p::AllocationRequest>::value) {
    m = allocation_request(1);
    r = p::encode(m, results_for(m), b.data(), b.size());
  } else if constexpr (std::is_same<TypeParam, p::BufferAdvertisement>::value) {
    m.descriptor = descriptor(0, 1, 64);
    r = p::encode(m, b.data(), b.size());
  } else if constexpr (std::is_same<TypeParam, p::WorkerHello>::value) {
    m.workers = 1;
    r = p::encode(m, b.data(), b.size());
  } else if constexpr (std::is_same<TypeParam, p::AllocationResponse>::value) {
    m.workers = 1;
    r = p::encode(m, b.data(), b.size());
  } else if constexpr (std::is_same<TypeParam, p::CodeHeader>::value) {
    m.library_size = 1;
    m.source.size = 1;
    r = p::encode(m, b.data(), b.size());
  } else {
    r = p::encode(m, b.data(), b.size());
  }
  ASSERT_TRUE(r.ok()) << p::describe(r);
  // "RFAS", the version little-endian, type little-endian.
  EXPECT_EQ(b[0], 'R');
  EXPECT_EQ(b[1], 'F');
  EXPECT_EQ(b[2], 'A');
  EXPECT_EQ(b[3], 'S');
  EXPECT_EQ(b[4], p::kVersion & 0xFF);
  EXPECT_EQ(b[5], p::kVersion >> 8);
  EXPECT_EQ(le16(&b[6]), static_cast<uint16_t>(TypeParam::kType));
}

TEST(ProtocolLayout, FieldsAreLittleEndianAtFixedOffsets) {
  p::InvocationHeader h = invocation(0x01020304u, 0x0a0b0c0d, 0x1e1f);
  h.slot = 200;
  h.payload_size = 100;
  h.flags = p::kSameTarget;
  std::vector<uint8_t> slot(256);
  ASSERT_TRUE(p::encode(h, slot.data(), slot.size()).ok());
  const uint8_t id[] = {4, 3, 2, 1};
  EXPECT_EQ(0, std::memcmp(&slot[0], id, 4));
  EXPECT_EQ(le32(&slot[4]), p::function_hash("echo"));
  EXPECT_EQ(le32(&slot[8]), 100u);
  EXPECT_EQ(le16(&slot[12]), 200u);
  EXPECT_EQ(le16(&slot[14]), 2u);

  p::BufferAdvertisement a;
  a.descriptor = descriptor(3, 2, 1024);
  a.descriptor.buffer = remote(0x1122334455667788ull, 0x99aabbccddeeff00ull, 4096);
  auto b = bytes_of(a);
  EXPECT_EQ(le64(&b[8]), 0x1122334455667788ull);
  EXPECT_EQ(le64(&b[16]), 0x99aabbccddeeff00ull);
  EXPECT_EQ(le64(&b[24]), 4096u);
  EXPECT_EQ(le32(&b[32]), 3u);
  EXPECT_EQ(le32(&b[36]), 2u);
  EXPECT_EQ(le32(&b[40]), 1024u);

  // A negative hot timeout is two's complement.
  p::AllocationRequest r = allocation_request(1);
  auto rb = encoded_request(r, results_for(r));
  EXPECT_EQ(le32(&rb[16]), 0xffffffffu);
}

TEST(ProtocolLayout, FastAndPortableByteOrderPathsAgree) {
  // The portable shift path is what a big-endian host runs; it must produce
  // the same bytes as the fast path taken here.
  uint8_t a[8], b[8];
  for (uint64_t v : {0ull, 1ull, 0x0102030405060708ull, ~0ull, 0x8000000000000000ull}) {
    p::detail::store_le<uint64_t>(a, v);
    p::detail::store_le_portable<uint64_t>(b, v);
    EXPECT_EQ(0, std::memcmp(a, b, 8));
    EXPECT_EQ(p::detail::load_le_portable<uint64_t>(a), v);
    EXPECT_EQ(p::detail::load_le<uint64_t>(b), v);
    p::detail::store_le_portable<uint16_t>(b, static_cast<uint16_t>(v));
    EXPECT_EQ(p::detail::load_le<uint16_t>(b), static_cast<uint16_t>(v));
    p::detail::store_le_portable<uint32_t>(b, static_cast<uint32_t>(v));
    EXPECT_EQ(p::detail::load_le<uint32_t>(b), static_cast<uint32_t>(v));
  }
  EXPECT_EQ(le64(a), ~0ull - 0x7fffffffffffffffull); // last value, read byte by byte
}

TEST(ProtocolLayout, ReservedFieldsAreWrittenAsZero) {
  p::ConnectReply c;
  c.status = p::ErrorCode::LeaseInvalid;
  c.reserved0.value = 0xffff;
  c.reserved1.value = 0xffffffff;
  auto b = bytes_of(c);
  for (size_t i = 10; i < 16; ++i)
    EXPECT_EQ(b[i], 0) << "byte " << i;
  // and ignored when read
  b[12] = 0x55;
  p::ConnectReply back;
  ASSERT_TRUE(p::decode(b.data(), b.size(), back).ok());
  EXPECT_EQ(back.reserved1.value, 0u);
  EXPECT_EQ(back.status, p::ErrorCode::LeaseInvalid);
}

TEST(ProtocolLayout, EncoderSetsTheHeaderItself) {
  p::Shutdown s;
  s.header.magic = 0xdeadbeef;
  s.header.version = 9;
  s.header.type = p::MessageType::Result;
  auto b = bytes_of(s);
  p::Header h;
  ASSERT_TRUE(p::peek(b.data(), b.size(), h).ok());
  EXPECT_EQ(h.type, p::MessageType::Shutdown);
}

// ---- round trips ----------------------------------------------------------------------

TEST(ProtocolRoundTrip, ClientHello) {
  p::ClientHello m;
  m.lease_id = 0xfedcba9876543210ull;
  m.token = token_with(3);
  auto back = round_trip(m);
  EXPECT_EQ(back.lease_id, m.lease_id);
  EXPECT_TRUE(p::equal(back.token, m.token));
}

TEST(ProtocolRoundTrip, ExecutorHello) {
  p::ExecutorHello m;
  m.allocation_id = 42;
  m.secret = token_with(99);
  auto back = round_trip(m);
  EXPECT_EQ(back.allocation_id, 42u);
  EXPECT_TRUE(p::equal(back.secret, m.secret));
}

TEST(ProtocolRoundTrip, WorkerHello) {
  p::WorkerHello m;
  m.allocation_id = 0x8000000000000001ull;
  m.worker = 255;
  m.workers = 256;
  auto back = round_trip(m);
  EXPECT_EQ(back.allocation_id, m.allocation_id);
  EXPECT_EQ(back.worker, 255u);
  EXPECT_EQ(back.workers, 256u);
}

TEST(ProtocolRoundTrip, ConnectReply) {
  p::ConnectReply m;
  m.status = p::ErrorCode::VersionMismatch;
  EXPECT_EQ(round_trip(m).status, p::ErrorCode::VersionMismatch);
}

TEST(ProtocolRoundTrip, AllocationRequestWithItsDescriptors) {
  p::AllocationRequest m = allocation_request(3);
  auto results = results_for(m);
  auto b = encoded_request(m, results);
  p::AllocationRequest back;
  std::vector<p::BufferDescriptor> back_results;
  p::WireResult r = p::decode(b.data(), b.size(), back, back_results);
  ASSERT_TRUE(r.ok()) << p::describe(r);
  EXPECT_EQ(r.size, b.size());
  EXPECT_EQ(back.cores, 3u);
  EXPECT_EQ(back.memory_mib, 2048u);
  EXPECT_EQ(back.hot_timeout_ms, -1);
  EXPECT_EQ(back.input_slots, 4u);
  EXPECT_EQ(back.input_slot_size, 4096u);
  EXPECT_EQ(back.client_port, 10123);
  EXPECT_EQ(back.library_size, 123456u);
  EXPECT_EQ(back.library_checksum, 0x1122334455667788ull);
  EXPECT_EQ(p::get_text(back.client_host), "fe80::1%eth0");
  ASSERT_EQ(back_results.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back_results[i].worker, i);
    EXPECT_EQ(back_results[i].buffer.addr, results[i].buffer.addr);
    EXPECT_EQ(back_results[i].buffer.key, results[i].buffer.key);
    EXPECT_EQ(back_results[i].buffer.size, results[i].buffer.size);
    EXPECT_EQ(back_results[i].slots, 4u);
    EXPECT_EQ(back_results[i].slot_size, 8192u);
  }
  EXPECT_EQ(encoded_request(back, back_results), b);
}

TEST(ProtocolRoundTrip, AllocationRequestAtTheLimits) {
  p::AllocationRequest m = allocation_request(p::kMaxWorkers);
  m.input_slots = p::kMaxSlots;
  m.hot_timeout_ms = 0;
  auto b = encoded_request(m, results_for(m));
  EXPECT_EQ(b.size(), p::kMaxAllocationRequestSize);
  p::AllocationRequest back;
  std::vector<p::BufferDescriptor> results;
  EXPECT_TRUE(p::decode(b.data(), b.size(), back, results).ok());
  EXPECT_EQ(results.size(), p::kMaxWorkers);
}

TEST(ProtocolRoundTrip, AllocationResponse) {
  p::AllocationResponse m;
  m.allocation_id = 0x0123456789abcdefull;
  m.workers = 8;
  auto back = round_trip(m);
  EXPECT_EQ(back.allocation_id, m.allocation_id);
  EXPECT_EQ(back.workers, 8u);
  EXPECT_EQ(back.status, p::ErrorCode::Ok);

  p::AllocationResponse refused;
  refused.status = p::ErrorCode::ResourcesUnavailable;
  p::set_text_truncated(refused.message, "requested 8 cores, 2 free");
  auto rb = round_trip(refused);
  EXPECT_EQ(rb.status, p::ErrorCode::ResourcesUnavailable);
  EXPECT_EQ(p::get_text(rb.message), "requested 8 cores, 2 free");
}

TEST(ProtocolRoundTrip, BufferAdvertisement) {
  p::BufferAdvertisement m;
  m.descriptor = descriptor(7, 16, 65536);
  auto back = round_trip(m);
  EXPECT_EQ(back.descriptor.worker, 7u);
  EXPECT_EQ(back.descriptor.slots, 16u);
  EXPECT_EQ(back.descriptor.slot_size, 65536u);
  EXPECT_EQ(back.descriptor.buffer.addr, m.descriptor.buffer.addr);
  EXPECT_EQ(back.descriptor.buffer.key, m.descriptor.buffer.key);
  EXPECT_EQ(back.descriptor.buffer.size, m.descriptor.buffer.size);
  EXPECT_EQ(back.descriptor.slot_stride, 0u);
  EXPECT_EQ(back.descriptor.offset(3), 3u * 65536u) << "packed slots when the stride is 0";
}

TEST(ProtocolRoundTrip, BufferAdvertisementWithStride) {
  // Input slots of 5000 bytes, each followed by a guard page: 12 KiB apart.
  p::BufferAdvertisement m;
  m.descriptor = descriptor(1, 4, 5000);
  m.descriptor.slot_stride = 12288;
  m.descriptor.buffer.size = 3 * 12288 + 5000;
  auto back = round_trip(m);
  EXPECT_EQ(back.descriptor.slot_stride, 12288u);
  EXPECT_EQ(back.descriptor.offset(0), 0u);
  EXPECT_EQ(back.descriptor.offset(3), 3u * 12288u);

  // A buffer that ends before the last slot does, or slots that overlap.
  std::vector<uint8_t> b(sizeof(p::BufferAdvertisement));
  p::BufferAdvertisement bad = m;
  bad.descriptor.buffer.size = 3 * 12288 + 4999;
  EXPECT_EQ(p::encode(bad, b.data(), b.size()).error, p::WireError::Inconsistent);
  bad = m;
  bad.descriptor.slot_stride = 4999;
  EXPECT_EQ(p::encode(bad, b.data(), b.size()).error, p::WireError::Inconsistent);
}

TEST(ProtocolRoundTrip, CodeHeader) {
  p::CodeHeader m;
  m.library_size = 5000;
  m.checksum = p::library_checksum("abc", 3);
  m.source = remote(0, 77, 8192);
  ASSERT_TRUE(p::set_text(m.name, "libfunctions.so"));
  auto back = round_trip(m);
  EXPECT_EQ(back.library_size, 5000u);
  EXPECT_EQ(back.checksum, m.checksum);
  EXPECT_EQ(back.source.key, 77u);
  EXPECT_EQ(back.source.size, 8192u);
  EXPECT_EQ(p::get_text(back.name), "libfunctions.so");
}

TEST(ProtocolRoundTrip, Ready) {
  p::Ready m;
  m.status = p::ErrorCode::LibraryInvalid;
  m.worker = 3;
  m.function_count = 0;
  p::set_text_truncated(m.message, std::string(500, 'x')); // truncated, still terminated
  auto back = round_trip(m);
  EXPECT_EQ(back.status, p::ErrorCode::LibraryInvalid);
  EXPECT_EQ(back.worker, 3u);
  EXPECT_EQ(p::get_text(back.message).size(), p::kMessageCapacity - 1);
}

TEST(ProtocolRoundTrip, InvocationHeaderInItsSlot) {
  // Decoded from where it starts, 16 bytes before the payload, to the slot's
  // end: the payload may fill the rest.
  std::vector<uint8_t> slot(1024);
  const size_t at = p::kSlotPrefix - p::kInvocationHeaderSize;
  p::InvocationHeader h = invocation(0xffffffffu, 1024 - 64, 5);
  p::WireResult w = p::encode(h, slot.data() + at, slot.size() - at);
  ASSERT_TRUE(w.ok()) << p::describe(w);
  EXPECT_EQ(w.size, p::kInvocationHeaderSize);
  p::InvocationHeader back;
  p::WireResult r = p::decode(slot.data() + at, slot.size() - at, back);
  ASSERT_TRUE(r.ok()) << p::describe(r);
  EXPECT_EQ(r.size, 1024u - at);
  EXPECT_EQ(back.invocation_id, 0xffffffffu);
  EXPECT_EQ(back.function, p::function_hash("echo"));
  EXPECT_EQ(back.payload_size, 1024u - 64);
  EXPECT_EQ(back.slot, 5);
  EXPECT_FALSE(back.has_target());
  // Both target flags, or unknown ones, are refused.
  for (uint16_t flags :
       {uint16_t(p::kWithTarget | p::kSameTarget), uint16_t(4), uint16_t(0x8000)}) {
    put16(&slot[at + 14], flags);
    EXPECT_FALSE(p::decode(slot.data() + at, slot.size() - at, back).ok()) << flags;
    p::InvocationHeader m = h;
    m.flags = flags;
    EXPECT_FALSE(p::encode(m, slot.data() + at, slot.size() - at).ok()) << flags;
  }
  for (uint16_t flags : {uint16_t(p::kWithTarget), uint16_t(p::kSameTarget)}) {
    put16(&slot[at + 14], flags);
    ASSERT_TRUE(p::decode(slot.data() + at, slot.size() - at, back).ok()) << flags;
    EXPECT_TRUE(back.has_target());
  }
}

TEST(ProtocolRoundTrip, ResultTarget) {
  std::vector<uint8_t> b(p::kResultTargetSize);
  p::ResultTarget t;
  t.target = remote(0x7f0000001000ull, 0x1122334455667788ull, 64 + 4096);
  t.offset = 48;
  t.capacity = 16 + 4096;
  ASSERT_TRUE(p::encode(t, b.data(), b.size()).ok());
  EXPECT_EQ(le64(&b[0]), 0x7f0000001000ull);
  EXPECT_EQ(le64(&b[8]), 0x1122334455667788ull);
  EXPECT_EQ(le64(&b[16]), 64u + 4096);
  EXPECT_EQ(le64(&b[24]), 48u);
  EXPECT_EQ(le32(&b[32]), 16u + 4096);
  p::ResultTarget back;
  ASSERT_TRUE(p::decode(b.data(), b.size(), back).ok());
  EXPECT_TRUE(back == t);
  EXPECT_EQ(back.target.key, 0x1122334455667788ull);
  EXPECT_EQ(back.offset, 48u);
  EXPECT_EQ(back.capacity, 16u + 4096);
  EXPECT_EQ(p::decode(b.data(), b.size() - 1, back).error, p::WireError::Truncated);

  // Targets a worker must refuse: too small for the result header, past the
  // region's end (also when offset + capacity would overflow), too large.
  auto refused = [&](uint64_t offset, uint32_t capacity, uint64_t size) {
    p::ResultTarget m = t;
    m.target.size = size;
    m.offset = offset;
    m.capacity = capacity;
    std::vector<uint8_t> raw(p::kResultTargetSize);
    p::encode(t, raw.data(), raw.size());
    std::memcpy(&raw[16], &size, 8); // raw: encode() validates too
    std::memcpy(&raw[24], &offset, 8);
    std::memcpy(&raw[32], &capacity, 4);
    p::ResultTarget out;
    return !p::decode(raw.data(), raw.size(), out).ok() &&
           !p::encode(m, raw.data(), raw.size()).ok();
  };
  EXPECT_TRUE(refused(0, 15, 4096));
  EXPECT_TRUE(refused(4096 - 63, 64, 4096));
  EXPECT_TRUE(refused(~0ull - 10, 64, 4096));
  EXPECT_TRUE(refused(4097, 16, 4096));
  EXPECT_TRUE(refused(0, (1u << 30) + 1, ~0ull));
  EXPECT_FALSE(refused(4096 - 64, 64, 4096));
  EXPECT_FALSE(refused(4096 - 16, 16, 4096));
}

TEST(ProtocolRoundTrip, ResultHeaderInItsSlot) {
  std::vector<uint8_t> slot(64);
  p::ResultHeader h;
  h.invocation_id = 0xfedcba98u;
  h.output_size = 0;
  h.status = p::ErrorCode::FunctionCrashed;
  h.slot = 255;
  h.detail = 11; // SIGSEGV
  ASSERT_TRUE(p::encode(h, slot.data(), slot.size()).ok());
  p::ResultHeader back;
  p::WireResult r = p::decode(slot.data(), slot.size(), back);
  ASSERT_TRUE(r.ok()) << p::describe(r);
  EXPECT_EQ(r.size, 16u);
  EXPECT_EQ(back.invocation_id, 0xfedcba98u);
  EXPECT_EQ(back.status, p::ErrorCode::FunctionCrashed);
  EXPECT_EQ(back.slot, 255);
  EXPECT_EQ(back.detail, 11u);
}

TEST(ProtocolRoundTrip, Accounting) {
  p::Accounting m;
  m.allocation_id = 9;
  m.worker = p::kAllWorkers;
  m.counters.allocation_ns = 1'000'000'000'000ull;
  m.counters.hot_polling_ns = 2;
  m.counters.execution_ns = 3;
  m.counters.invocations = 10'000;
  auto back = round_trip(m);
  EXPECT_EQ(back.worker, p::kAllWorkers);
  EXPECT_EQ(back.counters.allocation_ns, 1'000'000'000'000ull);
  EXPECT_EQ(back.counters.hot_polling_ns, 2u);
  EXPECT_EQ(back.counters.execution_ns, 3u);
  EXPECT_EQ(back.counters.invocations, 10'000u);
}

TEST(ProtocolRoundTrip, Shutdown) {
  p::Shutdown m;
  m.allocation_id = 5;
  m.reason = p::ErrorCode::ShuttingDown;
  auto back = round_trip(m);
  EXPECT_EQ(back.allocation_id, 5u);
  EXPECT_EQ(back.reason, p::ErrorCode::ShuttingDown);
}

TEST(ProtocolRoundTrip, PaddedPrivateDataIsAccepted) {
  // rdmacm delivers private data padded with zeros up to its maximum.
  p::WorkerHello m;
  m.allocation_id = 1;
  m.workers = 2;
  m.worker = 1;
  auto b = bytes_of(m);
  b.resize(56, 0);
  p::WorkerHello back;
  p::WireResult r = p::decode(b.data(), b.size(), back);
  ASSERT_TRUE(r.ok()) << p::describe(r);
  EXPECT_EQ(r.size, sizeof(p::WorkerHello));
  EXPECT_EQ(back.worker, 1u);
}

// ---- rejection ------------------------------------------------------------------------

TEST(ProtocolReject, BadMagic) {
  p::ClientHello m;
  auto b = bytes_of(m);
  b[0] = 'X';
  p::ClientHello back;
  EXPECT_EQ(p::decode(b.data(), b.size(), back).error, p::WireError::BadMagic);
  p::Header h;
  EXPECT_EQ(p::peek(b.data(), b.size(), h).error, p::WireError::BadMagic);
  // Big-endian magic is still wrong.
  auto c = bytes_of(m);
  std::swap(c[0], c[3]);
  std::swap(c[1], c[2]);
  EXPECT_EQ(p::decode(c.data(), c.size(), back).error, p::WireError::BadMagic);
}

TEST(ProtocolReject, WrongVersionReportsThePeersVersion) {
  p::ClientHello m;
  auto b = bytes_of(m);
  put16(&b[4], p::kVersion + 1);
  p::ClientHello back;
  p::WireResult r = p::decode(b.data(), b.size(), back);
  EXPECT_EQ(r.error, p::WireError::VersionMismatch);
  EXPECT_EQ(back.header.version, p::kVersion + 1);
  EXPECT_EQ(p::reply_code(r.error), p::ErrorCode::VersionMismatch);
  p::Header h;
  EXPECT_EQ(p::peek(b.data(), b.size(), h).error, p::WireError::VersionMismatch);
  EXPECT_EQ(h.version, p::kVersion + 1);
  // Versions 1 (before result targets), 2 (packed input slots), 3 (64-byte
  // invocation headers) and 4 (no lease secrets) are refused too.
  put16(&b[4], 4);
  EXPECT_EQ(p::decode(b.data(), b.size(), back).error, p::WireError::VersionMismatch);
  put16(&b[4], 3);
  EXPECT_EQ(p::decode(b.data(), b.size(), back).error, p::WireError::VersionMismatch);
  put16(&b[4], 2);
  EXPECT_EQ(p::decode(b.data(), b.size(), back).error, p::WireError::VersionMismatch);
  put16(&b[4], 1);
  EXPECT_EQ(p::decode(b.data(), b.size(), back).error, p::WireError::VersionMismatch);
  put16(&b[4], 0);
  EXPECT_EQ(p::decode(b.data(), b.size(), back).error, p::WireError::VersionMismatch);
}

TEST(ProtocolReject, WrongAndUnknownTypes) {
  p::ClientHello hello;
  auto b = bytes_of(hello);
  p::ExecutorHello other;
  EXPECT_EQ(p::decode(b.data(), b.size(), other).error, p::WireError::UnexpectedType);
  put16(&b[6], 99);
  p::ClientHello back;
  EXPECT_EQ(p::decode(b.data(), b.size(), back).error, p::WireError::UnknownType);
  put16(&b[6], 0);
  EXPECT_EQ(p::decode(b.data(), b.size(), back).error, p::WireError::UnknownType);
  EXPECT_EQ(p::reply_code(p::WireError::UnknownType), p::ErrorCode::BadRequest);
}

TEST(ProtocolReject, TruncatedInputOfEveryLength) {
  p::AllocationResponse m;
  m.workers = 1;
  auto b = bytes_of(m);
  p::AllocationResponse back;
  for (size_t len = 0; len < b.size(); ++len) {
    p::WireResult r = p::decode(b.data(), len, back);
    EXPECT_EQ(r.error, p::WireError::Truncated) << "length " << len;
  }
  p::Header h;
  EXPECT_EQ(p::peek(b.data(), 7, h).error, p::WireError::Truncated);
  EXPECT_EQ(p::peek(nullptr, 100, h).error, p::WireError::Truncated);
  EXPECT_EQ(p::decode(nullptr, 100, back).error, p::WireError::Truncated);
}

TEST(ProtocolReject, TruncatedAllocationRequestDescriptors) {
  p::AllocationRequest m = allocation_request(4);
  auto b = encoded_request(m, results_for(m));
  p::AllocationRequest back;
  std::vector<p::BufferDescriptor> results;
  p::WireResult r = p::decode(b.data(), b.size() - 1, back, results);
  EXPECT_EQ(r.error, p::WireError::Truncated) << p::describe(r);
  r = p::decode(b.data(), sizeof(p::AllocationRequest), back, results);
  EXPECT_EQ(r.error, p::WireError::Truncated);
  // cores claims more descriptors than were sent
  put32(&b[8], 5);
  r = p::decode(b.data(), b.size(), back, results);
  EXPECT_EQ(r.error, p::WireError::Truncated);
  EXPECT_TRUE(results.empty());
}

TEST(ProtocolReject, OversizedLengthsAndCounts) {
  p::AllocationRequest m = allocation_request(1);
  auto results = results_for(m);
  std::vector<uint8_t> b(p::kMaxAllocationRequestSize + 64);
  p::AllocationRequest back;
  std::vector<p::BufferDescriptor> out;

  auto expect_decode = [&](size_t offset, uint32_t value, p::WireError want) {
    auto good = encoded_request(m, results);
    std::copy(good.begin(), good.end(), b.begin());
    put32(&b[offset], value);
    p::WireResult r = p::decode(b.data(), b.size(), back, out);
    EXPECT_EQ(r.error, want) << "offset " << offset << " value " << value << ": " << p::describe(r);
  };
  expect_decode(8, p::kMaxWorkers + 1, p::WireError::TooLarge);   // cores
  expect_decode(8, 0xffffffffu, p::WireError::TooLarge);          // cores
  expect_decode(8, 0, p::WireError::InvalidField);                // cores
  expect_decode(20, p::kMaxSlots + 1, p::WireError::TooLarge);    // input_slots
  expect_decode(24, p::kMaxSlotSize + 1, p::WireError::TooLarge); // input_slot_size
  expect_decode(24, 63, p::WireError::InvalidField);              // input_slot_size < prefix
  expect_decode(16, static_cast<uint32_t>(-2), p::WireError::InvalidField); // hot timeout
  // library_size above 1 GiB (high word of the 64-bit field)
  expect_decode(36, 1, p::WireError::TooLarge);

  // A payload larger than its slot: the header claims more than the slot has
  // after it.
  std::vector<uint8_t> slot(256);
  ASSERT_TRUE(p::encode(invocation(1, 10, 0), slot.data(), slot.size()).ok());
  put32(&slot[8], 256 - 16 + 1);
  p::InvocationHeader h;
  EXPECT_EQ(p::decode(slot.data(), slot.size(), h).error, p::WireError::TooLarge);
  put32(&slot[8], 0xffffffffu);
  EXPECT_EQ(p::decode(slot.data(), slot.size(), h).error, p::WireError::TooLarge);
  put32(&slot[8], 256 - 16);
  EXPECT_TRUE(p::decode(slot.data(), slot.size(), h).ok());

  // Buffer advertisement: too many slots, slots larger than the buffer.
  p::BufferAdvertisement a;
  a.descriptor = descriptor(0, 2, 1024);
  auto ab = bytes_of(a);
  p::BufferAdvertisement aback;
  put32(&ab[36], p::kMaxSlots + 1);
  EXPECT_EQ(p::decode(ab.data(), ab.size(), aback).error, p::WireError::TooLarge);
  put32(&ab[36], 3); // 3 * 1024 > 2048-byte buffer
  EXPECT_EQ(p::decode(ab.data(), ab.size(), aback).error, p::WireError::Inconsistent);

  // Code header: library larger than the limit or than its source buffer.
  p::CodeHeader c;
  c.library_size = p::kMaxLibrarySize + 1;
  c.source.size = c.library_size;
  p::WireResult r;
  EXPECT_TRUE(p::to_bytes(c, &r).empty());
  EXPECT_EQ(r.error, p::WireError::TooLarge);
  c.library_size = 100;
  c.source.size = 99;
  EXPECT_TRUE(p::to_bytes(c, &r).empty());
  EXPECT_EQ(r.error, p::WireError::Inconsistent);
}

TEST(ProtocolReject, InconsistentAllocationDescriptors) {
  p::AllocationRequest m = allocation_request(2);
  std::vector<uint8_t> b(p::allocation_request_size(2));

  auto results = results_for(m);
  results.pop_back();
  EXPECT_EQ(p::encode(m, results, b.data(), b.size()).error, p::WireError::Inconsistent);

  results = results_for(m);
  std::swap(results[0], results[1]); // worker order
  EXPECT_EQ(p::encode(m, results, b.data(), b.size()).error, p::WireError::Inconsistent);

  results = results_for(m);
  results[1] = descriptor(1, m.input_slots - 1, 8192); // fewer result than input slots
  EXPECT_EQ(p::encode(m, results, b.data(), b.size()).error, p::WireError::Inconsistent);

  results = results_for(m);
  results[0] = descriptor(0, m.input_slots, 63); // cannot hold the header prefix
  EXPECT_EQ(p::encode(m, results, b.data(), b.size()).error, p::WireError::Inconsistent);

  // The same checks on the decoding side, on bytes a bad peer could send.
  results = results_for(m);
  b = encoded_request(m, results);
  size_t second = sizeof(p::AllocationRequest) + sizeof(p::BufferDescriptor);
  put32(&b[second + 24], 0); // worker index 0 in position 1
  p::AllocationRequest back;
  std::vector<p::BufferDescriptor> out;
  EXPECT_EQ(p::decode(b.data(), b.size(), back, out).error, p::WireError::Inconsistent);
}

TEST(ProtocolReject, InvalidFields) {
  // Unterminated text
  p::AllocationRequest m = allocation_request(1);
  auto b = encoded_request(m, results_for(m));
  std::memset(&b[48], 'a', p::kHostCapacity);
  p::AllocationRequest back;
  std::vector<p::BufferDescriptor> out;
  EXPECT_EQ(p::decode(b.data(), b.size(), back, out).error, p::WireError::InvalidField);
  // Empty host, port 0
  p::AllocationRequest empty = allocation_request(1);
  empty.client_host[0] = '\0';
  std::vector<uint8_t> eb(p::allocation_request_size(1));
  EXPECT_EQ(p::encode(empty, results_for(empty), eb.data(), eb.size()).error,
            p::WireError::InvalidField);
  p::AllocationRequest noport = allocation_request(1);
  noport.client_port = 0;
  EXPECT_EQ(p::encode(noport, results_for(noport), eb.data(), eb.size()).error,
            p::WireError::InvalidField);
  // ...unless the host is an opaque endpoint name, which includes everything.
  p::AllocationRequest named = allocation_request(1);
  named.client_port = 0;
  ASSERT_TRUE(p::set_text(named.client_host, "ofi:efa:fe80000000000000"));
  EXPECT_TRUE(p::encode(named, results_for(named), eb.data(), eb.size()).ok());
  p::AllocationRequest named_back;
  std::vector<p::BufferDescriptor> named_results;
  ASSERT_TRUE(p::decode(eb.data(), eb.size(), named_back, named_results).ok());
  EXPECT_EQ(std::string(p::get_text(named_back.client_host)), "ofi:efa:fe80000000000000");

  // A status that is not an ErrorCode
  std::vector<uint8_t> slot(64);
  p::ResultHeader rh;
  ASSERT_TRUE(p::encode(rh, slot.data(), slot.size()).ok());
  put16(&slot[8], p::kMaxErrorCode + 1);
  p::ResultHeader rback;
  EXPECT_EQ(p::decode(slot.data(), slot.size(), rback).error, p::WireError::InvalidField);

  p::Shutdown s;
  auto sb = bytes_of(s);
  put16(&sb[16], 0x8000);
  p::Shutdown sback;
  EXPECT_EQ(p::decode(sb.data(), sb.size(), sback).error, p::WireError::InvalidField);

  // Worker index out of range
  p::WorkerHello w;
  w.workers = 2;
  w.worker = 2;
  p::WireResult r;
  EXPECT_TRUE(p::to_bytes(w, &r).empty());
  EXPECT_EQ(r.error, p::WireError::Inconsistent);
}

TEST(ProtocolEncode, RefusesSmallBuffersAndPayloadsThatDoNotFit) {
  std::vector<uint8_t> small(31);
  p::Shutdown s;
  EXPECT_EQ(p::encode(s, small.data(), 23).error, p::WireError::BufferTooSmall);
  EXPECT_EQ(p::encode(s, nullptr, 100).error, p::WireError::BufferTooSmall);
  EXPECT_EQ(p::encode(invocation(1, 0, 0), small.data(), 15).error, p::WireError::BufferTooSmall);
  p::ResultHeader r;
  EXPECT_EQ(p::encode(r, small.data(), 15).error, p::WireError::BufferTooSmall);

  std::vector<uint8_t> slot(128);
  EXPECT_TRUE(p::encode(invocation(1, 112, 0), slot.data(), slot.size()).ok());
  EXPECT_EQ(p::encode(invocation(1, 113, 0), slot.data(), slot.size()).error,
            p::WireError::TooLarge);

  p::AllocationRequest m = allocation_request(2);
  std::vector<uint8_t> b(p::allocation_request_size(2) - 1);
  EXPECT_EQ(p::encode(m, results_for(m), b.data(), b.size()).error, p::WireError::BufferTooSmall);
}

// ---- immediate data -------------------------------------------------------------------

TEST(ProtocolImmediate, BitLayout) {
  EXPECT_EQ(p::make_immediate(0xab, 0x12345), 0x123450abu);
  EXPECT_EQ(p::make_immediate(0, 0, p::ErrorCode::OutputTooLarge), 0x00000300u);
  EXPECT_EQ(p::make_immediate(255, 0xfffff, p::ErrorCode::Timeout), 0xfffffcffu);
  // Only the low 20 bits of the invocation id travel.
  EXPECT_EQ(p::make_immediate(1, 0x100000), 0x00000001u);
  EXPECT_EQ(p::make_immediate(1, 0xabcdef12345ull), 0x12345001u);
}

TEST(ProtocolImmediate, RoundTripAndMatch) {
  for (uint32_t slot : {0u, 1u, 127u, 255u}) {
    for (uint64_t id : {0ull, 1ull, 0xfffffull, 0x100000ull, 0xffffffffffffffffull}) {
      for (uint16_t code = 0; code <= p::kMaxErrorCode; ++code) {
        auto status = static_cast<p::ErrorCode>(code);
        uint32_t imm = p::make_immediate(slot, id, status);
        p::Immediate parsed = p::parse_immediate(imm);
        EXPECT_EQ(parsed.slot, slot);
        EXPECT_EQ(parsed.status, status);
        EXPECT_EQ(parsed.sequence, static_cast<uint32_t>(id & 0xfffff));
        EXPECT_TRUE(p::immediate_matches(imm, id));
        EXPECT_FALSE(p::immediate_matches(imm, id + 1));
      }
    }
  }
  static_assert(p::parse_immediate(p::make_immediate(9, 77)).slot == 9, "constexpr");
}

// ---- hashes, tokens, text, names -------------------------------------------------------

TEST(ProtocolHash, Fnv1aReferenceValues) {
  static_assert(p::function_hash("") == 0x811c9dc5u, "FNV-1a 32 offset basis");
  EXPECT_EQ(p::function_hash("a"), 0xe40c292cu);
  EXPECT_EQ(p::function_hash("foobar"), 0xbf9cf968u);
  EXPECT_EQ(p::library_checksum("", 0), 0xcbf29ce484222325ull);
  EXPECT_EQ(p::library_checksum("a", 1), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(p::library_checksum("foobar", 6), 0x85944171f73967e8ull);
}

TEST(ProtocolHash, FunctionNameCarriesTheWireHash) {
  // Hashed once, at compile time, by the type applications name calls with.
  static constexpr rfaas::function_name echo("echo");
  static_assert(echo.hash() == p::function_hash("echo"), "the wire's hash");
  static_assert(rfaas::function_name("foobar").hash() == 0xbf9cf968u, "FNV-1a");
  // Every spelling of a name converts, and keeps the characters it names.
  const std::string owned = "sum_squares";
  const std::string_view view = owned;
  for (const rfaas::function_name &f : {rfaas::function_name(owned), rfaas::function_name(view),
                                        rfaas::function_name(owned.c_str())}) {
    EXPECT_EQ(f.hash(), p::function_hash("sum_squares"));
    EXPECT_EQ(f.name(), "sum_squares");
  }
  EXPECT_NE(rfaas::function_name("echo").hash(), rfaas::function_name("echo ").hash());
}

TEST(ProtocolToken, ConstantTimeEquality) {
  p::Token a = token_with(1), b = token_with(1);
  EXPECT_TRUE(p::equal(a, b));
  b.bytes[15] ^= 1;
  EXPECT_FALSE(p::equal(a, b));
  b = a;
  b.bytes[0] ^= 0x80;
  EXPECT_FALSE(p::equal(a, b));
}

TEST(ProtocolText, FixedFields) {
  char f[8];
  EXPECT_TRUE(p::set_text(f, "1234567"));
  EXPECT_EQ(p::get_text(f), "1234567");
  EXPECT_FALSE(p::set_text(f, "12345678"));
  EXPECT_EQ(p::get_text(f), "1234567"); // unchanged
  p::set_text_truncated(f, "abcdefghij");
  EXPECT_EQ(p::get_text(f), "abcdefg");
  std::memset(f, 'z', sizeof f);
  EXPECT_EQ(p::get_text(f).size(), sizeof f);
}

TEST(ProtocolNames, EveryValueHasAName) {
  for (uint16_t t = 1; t <= p::kMaxMessageType; ++t)
    EXPECT_STRNE(p::to_string(static_cast<p::MessageType>(t)), "unknown_message_type") << t;
  for (uint16_t c = 0; c <= p::kMaxErrorCode; ++c)
    EXPECT_STRNE(p::to_string(static_cast<p::ErrorCode>(c)), "unknown_error_code") << c;
  EXPECT_STREQ(p::to_string(p::ErrorCode::UnknownFunction), "unknown_function");
  for (int e = 0; e <= static_cast<int>(p::WireError::InvalidField); ++e)
    EXPECT_STRNE(p::to_string(static_cast<p::WireError>(e)), "unknown wire error") << e;

  p::ClientHello m;
  auto b = bytes_of(m);
  put16(&b[4], p::kVersion + 1);
  p::ClientHello back;
  std::string text = p::describe(p::decode(b.data(), b.size(), back));
  EXPECT_NE(text.find("version mismatch"), std::string::npos) << text;
  EXPECT_NE(text.find("Header.version"), std::string::npos) << text;
}
