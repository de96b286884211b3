#include <rdmalib/capabilities.hpp>
#include <rdmalib/errors.hpp>

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

using namespace rdmalib;

namespace {

// Sets an environment variable for the lifetime of the object and restores the
// previous state afterwards, so tests do not leak into each other.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = std::getenv(name)) {
      had_ = true;
      old_ = old;
    }
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

private:
  const char *name_;
  bool had_ = false;
  std::string old_;
};

} // namespace

TEST(CapabilityMask, EmptyStringIsEmptyMask) {
  EXPECT_EQ(CapabilityMask::parse("").disabled, 0u);
  EXPECT_EQ(CapabilityMask::parse("  ").disabled, 0u);
  EXPECT_EQ(CapabilityMask{}.to_string(), "");
}

TEST(CapabilityMask, EachNameMapsToItsBit) {
  EXPECT_EQ(CapabilityMask::parse("remote_cq_data").disabled, uint32_t(CapRemoteCqData));
  EXPECT_EQ(CapabilityMask::parse("atomics").disabled, uint32_t(CapAtomics));
  EXPECT_EQ(CapabilityMask::parse("virtual_addressing").disabled, uint32_t(CapVirtualAddressing));
  EXPECT_EQ(CapabilityMask::parse("wait_fd").disabled, uint32_t(CapWaitFd));
  EXPECT_EQ(CapabilityMask::parse("inline").disabled, uint32_t(CapInline));
  EXPECT_EQ(CapabilityMask::parse("shared_endpoint").disabled, uint32_t(CapSharedEndpoint));
}

TEST(CapabilityMask, ListWithSpacesAndTrailingComma) {
  CapabilityMask m = CapabilityMask::parse(" atomics , remote_cq_data,");
  EXPECT_TRUE(m.disables(CapAtomics));
  EXPECT_TRUE(m.disables(CapRemoteCqData));
  EXPECT_FALSE(m.disables(CapWaitFd));
}

TEST(CapabilityMask, ToStringIsCanonical) {
  CapabilityMask m =
      CapabilityMask::parse("inline,wait_fd,atomics,virtual_addressing,remote_cq_data");
  EXPECT_EQ(m.to_string(), "remote_cq_data,atomics,virtual_addressing,wait_fd,inline");
  EXPECT_EQ(CapabilityMask::parse(m.to_string()).disabled, m.disabled);
  EXPECT_EQ(CapabilityMask::parse("atomics,atomics").to_string(), "atomics");
}

TEST(CapabilityMask, UnionOperator) {
  CapabilityMask a{CapAtomics}, b{CapWaitFd};
  EXPECT_EQ((a | b).to_string(), "atomics,wait_fd");
}

TEST(CapabilityMask, UnknownNameNamesTokenAndListsValidOnes) {
  try {
    CapabilityMask::parse("atomics,remote_cqdata");
    FAIL() << "parse did not throw";
  } catch (const Error &e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    std::string msg = e.what();
    EXPECT_NE(msg.find("\"remote_cqdata\""), std::string::npos) << msg;
    for (const char *name : {"remote_cq_data", "atomics", "virtual_addressing", "wait_fd", "inline",
                             "shared_endpoint"})
      EXPECT_NE(msg.find(name), std::string::npos)
          << "valid name " << name << " not listed: " << msg;
  }
}

TEST(CapabilityMask, FromEnvironmentUnsetIsEmpty) {
  ScopedEnv env("RDMALIB_DISABLE_CAPS", nullptr);
  EXPECT_EQ(CapabilityMask::from_environment().disabled, 0u);
}

TEST(CapabilityMask, FromEnvironmentParsesList) {
  ScopedEnv env("RDMALIB_DISABLE_CAPS", "remote_cq_data,wait_fd");
  CapabilityMask m = CapabilityMask::from_environment();
  EXPECT_EQ(m.disabled, uint32_t(CapRemoteCqData | CapWaitFd));
}

TEST(CapabilityMask, FromEnvironmentBadValueNamesVariable) {
  ScopedEnv env("RDMALIB_DISABLE_CAPS", "bogus");
  try {
    CapabilityMask::from_environment();
    FAIL() << "from_environment did not throw";
  } catch (const Error &e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    std::string msg = e.what();
    EXPECT_NE(msg.find("RDMALIB_DISABLE_CAPS"), std::string::npos) << msg;
    EXPECT_NE(msg.find("\"bogus\""), std::string::npos) << msg;
  }
}

TEST(Capabilities, DescribeListsEveryField) {
  Capabilities c;
  c.endpoint = EndpointType::ReliableDatagram;
  c.progress = Progress::Manual;
  c.remote_cq_data = true;
  c.notify_message_size = 16;
  c.max_inline = 64;
  c.max_message = 1048576;
  c.max_private_data = 56;
  std::string d = c.describe();
  EXPECT_EQ(d.find('\n'), std::string::npos) << "describe() must be one line: " << d;
  for (const char *field :
       {"endpoint=rdm", "progress=manual", "remote_cq_data=yes", "atomics=no", "provider_keys=no",
        "virtual_addressing=no", "local_registration=no", "endpoint_bound_memory=no",
        "write_consumes_receive=no", "notify_message_size=16", "wait_fd=no", "max_inline=64",
        "max_message=1048576", "mr_key_size=8", "max_private_data=56"})
    EXPECT_NE(d.find(field), std::string::npos) << "missing " << field << " in: " << d;
}

TEST(Capabilities, DescribeDefaults) {
  std::string d = Capabilities{}.describe();
  EXPECT_NE(d.find("endpoint=connected"), std::string::npos) << d;
  EXPECT_NE(d.find("progress=auto"), std::string::npos) << d;
}

TEST(Capabilities, ProgressSpellings) {
  EXPECT_STREQ(rdmalib::to_string(Progress::Auto), "auto");
  EXPECT_STREQ(rdmalib::to_string(Progress::Manual), "manual");
  EXPECT_STREQ(rdmalib::to_string(Progress::Thread), "thread");
  Capabilities c;
  c.progress = Progress::Thread;
  EXPECT_NE(c.describe().find("progress=thread"), std::string::npos) << c.describe();
}

TEST(Capabilities, EndpointTypeNamesRoundTrip) {
  for (EndpointType e : {EndpointType::Connected, EndpointType::ReliableDatagram}) {
    EndpointType back =
        e == EndpointType::Connected ? EndpointType::ReliableDatagram : EndpointType::Connected;
    EXPECT_TRUE(parse_endpoint_type(to_string(e), back)) << to_string(e);
    EXPECT_EQ(back, e);
  }
  EXPECT_STREQ(to_string(EndpointType::Connected), "connected");
  EXPECT_STREQ(to_string(EndpointType::ReliableDatagram), "rdm");
  // libfabric's name is read (RFAAS_TEST_PROVIDERS says "tcp/msg"), never written.
  EndpointType t = EndpointType::ReliableDatagram;
  EXPECT_TRUE(parse_endpoint_type("msg", t));
  EXPECT_EQ(t, EndpointType::Connected);
  for (const char *bad : {"", "auto", "RDM", "dgram"}) {
    EXPECT_FALSE(parse_endpoint_type(bad, t)) << bad;
    EXPECT_EQ(t, EndpointType::Connected);
  }
}

TEST(Capabilities, ProgressNamesRoundTrip) {
  for (Progress p : {Progress::Auto, Progress::Manual, Progress::Thread}) {
    Progress back = p == Progress::Auto ? Progress::Thread : Progress::Auto;
    EXPECT_TRUE(parse_progress(to_string(p), back)) << to_string(p);
    EXPECT_EQ(back, p);
  }
  Progress untouched = Progress::Manual;
  EXPECT_FALSE(parse_progress("threads", untouched));
  EXPECT_EQ(untouched, Progress::Manual);
}
