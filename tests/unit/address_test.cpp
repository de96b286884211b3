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
