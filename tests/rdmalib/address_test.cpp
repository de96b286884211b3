#include <rdmalib/address.hpp>
#include <rdmalib/errors.hpp>

#include <gtest/gtest.h>

using rdmalib::Address;
using rdmalib::Error;
using rdmalib::ErrorKind;

namespace {

// Parse must fail with Error(Config) whose message quotes the bad text.
void expect_bad(const std::string &text, const std::string &why_fragment) {
  try {
    Address::parse(text);
    ADD_FAILURE() << "parse(\"" << text << "\") did not throw";
  } catch (const Error &e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config) << e.what();
    std::string msg = e.what();
    EXPECT_NE(msg.find("\"" + text + "\""), std::string::npos)
        << "message does not quote the bad text: " << msg;
    EXPECT_NE(msg.find(why_fragment), std::string::npos)
        << "message does not say \"" << why_fragment << "\": " << msg;
  }
}

} // namespace

TEST(AddressParse, Ipv4) {
  Address a = Address::parse("127.0.0.1:7000");
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, 7000);
}

TEST(AddressParse, HostName) {
  Address a = Address::parse("node-17.cluster:1");
  EXPECT_EQ(a.host, "node-17.cluster");
  EXPECT_EQ(a.port, 1);
}

TEST(AddressParse, PortBounds) {
  EXPECT_EQ(Address::parse("h:0").port, 0);
  EXPECT_EQ(Address::parse("h:65535").port, 65535);
  EXPECT_EQ(Address::parse("h:00080").port, 80);
}

TEST(AddressParse, Ipv6InBrackets) {
  Address a = Address::parse("[::1]:7000");
  EXPECT_EQ(a.host, "::1");
  EXPECT_EQ(a.port, 7000);
  Address b = Address::parse("[fe80::1%eth0]:65535");
  EXPECT_EQ(b.host, "fe80::1%eth0");
  EXPECT_EQ(b.port, 65535);
}

TEST(AddressParse, RejectsMalformed) {
  expect_bad("", "empty");
  expect_bad("127.0.0.1", "missing ':port'");
  expect_bad("127.0.0.1:", "missing port");
  expect_bad(":7000", "empty host");
  expect_bad("host:70000", "out of range");
  expect_bad("host:123456", "out of range");
  expect_bad("host:-1", "not a number");
  expect_bad("host:+1", "not a number");
  expect_bad("host:12x", "not a number");
  expect_bad("host: 1", "not a number");
  expect_bad("::1:7000", "brackets");
  expect_bad("[::1]7000", "missing ':port'");
  expect_bad("[::1", "missing ']'");
  expect_bad("[]:7000", "empty host");
  expect_bad("[::1]:", "missing port");
  expect_bad("my host:1", "invalid characters");
}

TEST(AddressToString, Ipv4AndName) {
  EXPECT_EQ((Address{"127.0.0.1", 7000}).to_string(), "127.0.0.1:7000");
  EXPECT_EQ((Address{"localhost", 0}).to_string(), "localhost:0");
}

TEST(AddressToString, Ipv6GetsBrackets) {
  EXPECT_EQ((Address{"::1", 7000}).to_string(), "[::1]:7000");
}

TEST(AddressToString, RoundTrips) {
  for (const char *text : {"10.0.0.1:1", "[2001:db8::7]:65535", "example.org:443"}) {
    Address a = Address::parse(text);
    EXPECT_EQ(a.to_string(), text);
    EXPECT_EQ(Address::parse(a.to_string()), a);
  }
}

TEST(AddressCompare, EqualityUsesHostAndPort) {
  EXPECT_EQ((Address{"a", 1}), (Address{"a", 1}));
  EXPECT_NE((Address{"a", 1}), (Address{"a", 2}));
  EXPECT_NE((Address{"a", 1}), (Address{"b", 1}));
}

// ---- opaque provider names ("ofi:FORMAT:HEX") ------------------------------------

TEST(AddressOpaque, PrintsFormatAndLowerCaseHex) {
  Address a;
  a.name = {0x00, 0x0a, 0xff, 0x7f};
  a.format = "efa";
  EXPECT_TRUE(a.opaque());
  EXPECT_EQ(a.to_string(), "ofi:efa:000aff7f");
  EXPECT_TRUE(a.host.empty());
  EXPECT_EQ(a.port, 0);
}

TEST(AddressOpaque, ParseRoundTripsAndAcceptsUpperCase) {
  Address a = Address::parse("ofi:in:0200A1B27F000001");
  ASSERT_TRUE(a.opaque());
  EXPECT_EQ(a.format, "in");
  EXPECT_EQ(a.name, (std::vector<uint8_t>{0x02, 0x00, 0xa1, 0xb2, 0x7f, 0x00, 0x00, 0x01}));
  EXPECT_EQ(a.to_string(), "ofi:in:0200a1b27f000001");
  EXPECT_EQ(Address::parse(a.to_string()), a);
  EXPECT_FALSE(Address::parse("127.0.0.1:7").opaque());
}

TEST(AddressOpaque, MalformedNamesAreRefused) {
  expect_bad("ofi:efa", "missing ':'");
  expect_bad("ofi::00", "1 to 16 characters");
  expect_bad("ofi:EFA:00", "characters other than");
  expect_bad("ofi:efa:", "empty name");
  expect_bad("ofi:efa:abc", "odd number");
  expect_bad("ofi:efa:zz", "not a hexadecimal digit");
  expect_bad("ofi:efa:" + std::string(2 * 257, 'a'), "longer than 256 bytes");
}

TEST(AddressOpaque, HostTextCarriesTheWholeName) {
  // Protocols with separate host and port fields carry an opaque name whole
  // in the host field; host:port addresses keep their two fields.
  Address ip{"10.1.2.3", 7000};
  EXPECT_EQ(ip.host_text(), "10.1.2.3");
  EXPECT_EQ(Address::from_host_text(ip.host_text(), ip.port), ip);
  Address name = Address::parse("ofi:efa:fe800000000000000000000000000001");
  EXPECT_EQ(name.host_text(), name.to_string());
  EXPECT_EQ(Address::from_host_text(name.host_text(), 0), name);
  EXPECT_EQ(Address::from_host_text(name.host_text(), 9), name) << "the port is ignored";
  EXPECT_THROW(Address::from_host_text("ofi:efa:0", 0), Error);
}

TEST(AddressOpaque, EqualityComparesTheName) {
  EXPECT_EQ(Address::parse("ofi:efa:01"), Address::parse("ofi:efa:01"));
  EXPECT_NE(Address::parse("ofi:efa:01"), Address::parse("ofi:efa:02"));
  EXPECT_NE(Address::parse("ofi:efa:01"), Address::parse("ofi:in:01"));
}
