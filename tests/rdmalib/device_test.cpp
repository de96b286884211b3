#include <rdmalib/device.hpp>
#include <rdmalib/errors.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <unistd.h>

using namespace rdmalib;

namespace {

// A private temporary directory, removed with its files at the end of the test.
class TempDir {
public:
  TempDir() {
    const char *base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/rdmalib-unit-XXXXXX";
    if (!mkdtemp(tmpl.data()))
      throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    for (const auto &f : files_)
      std::remove(f.c_str());
    rmdir(path_.c_str());
  }
  std::string file(const std::string &name, const std::string &content) {
    std::string p = path_ + "/" + name;
    std::ofstream(p) << content;
    files_.push_back(p);
    return p;
  }
  std::string path(const std::string &name) {
    files_.push_back(path_ + "/" + name);
    return files_.back();
  }
  const std::string &dir() const { return path_; }

private:
  std::string path_;
  std::vector<std::string> files_;
};

const char *kGood = R"({
  "devices": [
    { "name": "lo-tcp", "provider": "tcp", "domain": "lo", "interface": "lo",
      "ip_address": "127.0.0.1", "port": 7000, "max_inline_data": 64,
      "default_receive_buffer_size": 16, "endpoint": "connected" },
    { "name": "lo-shm", "provider": "shm", "ip_address": "127.0.0.2", "endpoint": "rdm" },
    { "name": "minimal" }
  ]
})";

// Loads `content` from a file and expects Error(Config) whose message names the
// file and contains every fragment (typically the JSON path of the bad key).
std::string expect_load_error(const std::string &content,
                              std::initializer_list<std::string> fragments) {
  TempDir dir;
  std::string path = dir.file("devices.json", content);
  try {
    DeviceDatabase::load(path);
    ADD_FAILURE() << "load() accepted: " << content;
    return "";
  } catch (const Error &e) {
    std::string msg = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::Config) << msg;
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << "message does not start with the file: " << msg;
    for (const auto &f : fragments)
      EXPECT_NE(msg.find(f), std::string::npos) << "message lacks \"" << f << "\": " << msg;
    return msg;
  }
}

} // namespace

TEST(DeviceDatabase, LoadsGoodFile) {
  TempDir dir;
  DeviceDatabase db = DeviceDatabase::load(dir.file("devices.json", kGood));
  ASSERT_EQ(db.devices().size(), 3u);
  const DeviceConfig &t = db.devices()[0];
  EXPECT_EQ(t.name, "lo-tcp");
  EXPECT_EQ(t.provider, "tcp");
  EXPECT_EQ(t.domain, "lo");
  EXPECT_EQ(t.interface, "lo");
  EXPECT_EQ(t.ip_address, "127.0.0.1");
  EXPECT_EQ(t.port, 7000);
  EXPECT_EQ(t.max_inline_data, 64u);
  EXPECT_EQ(t.default_receive_buffer_size, 16u);
  EXPECT_EQ(t.endpoint, EndpointPreference::Connected);
  EXPECT_EQ(db.devices()[1].endpoint, EndpointPreference::ReliableDatagram);
}

TEST(DeviceDatabase, MissingKeysTakeDefaults) {
  DeviceDatabase db = DeviceDatabase::parse(kGood, "inline");
  const DeviceConfig &m = db.devices()[2];
  DeviceConfig def;
  EXPECT_EQ(m.name, "minimal");
  EXPECT_EQ(m.provider, def.provider);
  EXPECT_EQ(m.ip_address, def.ip_address);
  EXPECT_EQ(m.port, def.port);
  EXPECT_EQ(m.max_inline_data, def.max_inline_data);
  EXPECT_EQ(m.default_receive_buffer_size, def.default_receive_buffer_size);
  EXPECT_EQ(m.endpoint, EndpointPreference::Auto);
}

TEST(DeviceDatabase, EmptyListIsValid) {
  EXPECT_TRUE(DeviceDatabase::parse(R"({"devices": []})", "x").devices().empty());
}

TEST(DeviceDatabase, SaveThenLoadRoundTrips) {
  TempDir dir;
  DeviceDatabase db = DeviceDatabase::parse(kGood, "inline");
  std::string path = dir.path("out.json");
  db.save(path);
  DeviceDatabase back = DeviceDatabase::load(path);
  ASSERT_EQ(back.devices().size(), db.devices().size());
  for (size_t i = 0; i < db.devices().size(); ++i) {
    const auto &a = db.devices()[i], &b = back.devices()[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.provider, b.provider);
    EXPECT_EQ(a.domain, b.domain);
    EXPECT_EQ(a.interface, b.interface);
    EXPECT_EQ(a.ip_address, b.ip_address);
    EXPECT_EQ(a.port, b.port);
    EXPECT_EQ(a.max_inline_data, b.max_inline_data);
    EXPECT_EQ(a.default_receive_buffer_size, b.default_receive_buffer_size);
    EXPECT_EQ(a.endpoint, b.endpoint);
  }
  EXPECT_EQ(back.to_json(), db.to_json());
}

TEST(DeviceDatabase, ToJsonWritesDocumentedKeys) {
  std::string j = DeviceDatabase::parse(kGood, "inline").to_json();
  for (const char *key :
       {"\"devices\"", "\"name\"", "\"provider\"", "\"domain\"", "\"interface\"", "\"ip_address\"",
        "\"port\"", "\"max_inline_data\"", "\"default_receive_buffer_size\"", "\"endpoint\""})
    EXPECT_NE(j.find(key), std::string::npos) << key << " missing in " << j;
  EXPECT_NE(j.find("\"rdm\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"connected\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"auto\""), std::string::npos) << j;
}

TEST(DeviceDatabase, SaveToUnwritablePathNamesIt) {
  DeviceDatabase db;
  std::string path = "/nonexistent-dir-rdmalib/devices.json";
  try {
    db.save(path);
    FAIL() << "save() did not throw";
  } catch (const Error &e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(DeviceDatabase, MissingFileNamesFile) {
  std::string path = "/nonexistent-dir-rdmalib/devices.json";
  try {
    DeviceDatabase::load(path);
    FAIL() << "load() did not throw";
  } catch (const Error &e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("No such file"), std::string::npos) << "system error text missing: " << msg;
  }
}

TEST(DeviceDatabase, MalformedJsonGivesBytePosition) {
  // The stray comma at byte 40 (0-based 39) makes the array invalid.
  std::string bad = R"({"devices": [ {"name": "a", "port": 1},, ]})";
  std::string msg = expect_load_error(bad, {"malformed JSON", "at byte "});
  EXPECT_NE(msg.find("parse error"), std::string::npos) << "nlohmann's text missing: " << msg;
}

// Found by fuzzing: nlohmann reports this as out_of_range, not parse_error.
TEST(DeviceDatabase, NumberTooLargeForADouble) {
  expect_load_error(R"({"devices": [ {"name": "a", "port": 1e400} ]})",
                    {"unreadable JSON", "number overflow"});
}

TEST(DeviceDatabase, TruncatedFile) {
  expect_load_error(R"({"devices": [ {"name": "a")", {"malformed JSON", "at byte "});
}

TEST(DeviceDatabase, WrongTypePortNamesKeyPath) {
  expect_load_error(R"({"devices": [ {"name": "a"}, {"name": "b", "port": "7000"} ]})",
                    {"devices[1].port", "expected an integer 0..65535", "string"});
}

TEST(DeviceDatabase, PortOutOfRange) {
  expect_load_error(R"({"devices": [ {"name": "a", "port": 70000} ]})",
                    {"devices[0].port", "expected an integer 0..65535", "70000"});
  expect_load_error(R"({"devices": [ {"name": "a", "port": -1} ]})",
                    {"devices[0].port", "expected an integer 0..65535", "-1"});
  expect_load_error(R"({"devices": [ {"name": "a", "port": 70.5} ]})",
                    {"devices[0].port", "expected an integer 0..65535"});
}

TEST(DeviceDatabase, WrongTypeStringNamesKeyPath) {
  expect_load_error(R"({"devices": [ {"name": "a", "provider": 5} ]})",
                    {"devices[0].provider", "expected a string"});
  expect_load_error(R"({"devices": [ {"name": ["a"]} ]})",
                    {"devices[0].name", "expected a non-empty string", "array"});
}

TEST(DeviceDatabase, UnknownKeyNamesKeyPath) {
  std::string msg = expect_load_error(
      R"({"devices": [ {"name": "a"}, {"name": "b"}, {"name": "c", "prot": 7000} ]})",
      {"devices[2].prot", "unknown key"});
  EXPECT_NE(msg.find("port"), std::string::npos) << "valid keys not listed: " << msg;
}

TEST(DeviceDatabase, UnknownTopLevelKey) {
  expect_load_error(R"({"devices": [], "device": []})", {"device", "unknown key"});
}

TEST(DeviceDatabase, BadEndpointValue) {
  expect_load_error(R"({"devices": [ {"name": "a", "endpoint": "MSG"} ]})",
                    {"devices[0].endpoint", "expected one of auto, connected (or msg), rdm",
                     "got string \"MSG\""});
  expect_load_error(R"({"devices": [ {"name": "a", "endpoint": 1} ]})",
                    {"devices[0].endpoint", "expected one of auto", "got number 1"});
}

TEST(DeviceDatabase, MsgIsReadAsConnectedAndWrittenAsConnected) {
  // "msg" (libfabric's FI_EP_MSG) is what RFAAS_TEST_PROVIDERS and the
  // benchmarks say; every reader accepts it, every writer says "connected".
  DeviceDatabase db =
      DeviceDatabase::parse(R"({"devices": [ {"name": "a", "endpoint": "msg"} ]})", "o");
  EXPECT_EQ(db.devices()[0].endpoint, EndpointPreference::Connected);
  EXPECT_NE(db.to_json().find("\"connected\""), std::string::npos) << db.to_json();
}

// The one-line format every configuration reader shares (ConfigNode):
// "<file>: <JSON path>: <problem>; <expected or valid choices>".
TEST(DeviceDatabase, OneLineErrorFormat) {
  auto error_of = [](const std::string &text) -> std::string {
    try {
      DeviceDatabase::parse(text, "devices.json");
    } catch (const Error &e) {
      return e.what();
    }
    return "(accepted)";
  };
  EXPECT_EQ(error_of(R"({"devices": [ {"name": "a", "prot": 1} ]})"),
            "devices.json: devices[0].prot: unknown key; valid keys here: name, provider, domain, "
            "interface, ip_address, port, max_inline_data, default_receive_buffer_size, endpoint");
  EXPECT_EQ(error_of(R"({"devices": [ {"name": "a", "port": "7000"} ]})"),
            "devices.json: devices[0].port: expected an integer 0..65535, got string \"7000\"");
  EXPECT_EQ(error_of(R"({"devices": [ {"provider": "tcp"} ]})"),
            "devices.json: devices[0].name: missing required key; expected a string: the name "
            "users select the device by");
  EXPECT_EQ(error_of(R"({"devices": [ {"name": "a", "endpoint": "fast"} ]})"),
            "devices.json: devices[0].endpoint: expected one of auto, connected (or msg), rdm, "
            "got string \"fast\"");
  for (const char *text : {R"({"devices": [ {"name": "a", "prot": 1} ]})", R"({"x": 1})"})
    EXPECT_EQ(error_of(text).find('\n'), std::string::npos) << "not one line: " << error_of(text);
}

TEST(DeviceDatabase, EndpointSpellingsRoundTrip) {
  using rdmalib::EndpointPreference;
  for (EndpointPreference e : {EndpointPreference::Auto, EndpointPreference::Connected,
                               EndpointPreference::ReliableDatagram}) {
    EndpointPreference back =
        e == EndpointPreference::Auto ? EndpointPreference::Connected : EndpointPreference::Auto;
    EXPECT_TRUE(rdmalib::parse_endpoint_preference(rdmalib::to_string(e), back)) << to_string(e);
    EXPECT_EQ(back, e);
  }
  EndpointPreference untouched = EndpointPreference::Connected;
  EXPECT_TRUE(rdmalib::parse_endpoint_preference("msg", untouched));
  EXPECT_EQ(untouched, EndpointPreference::Connected);
  for (const char *bad : {"MSG", "", "RDM", "connected ", "datagram"}) {
    EXPECT_FALSE(rdmalib::parse_endpoint_preference(bad, untouched)) << bad;
    EXPECT_EQ(untouched, EndpointPreference::Connected) << bad;
  }
}

TEST(DeviceDatabase, MissingOrEmptyName) {
  expect_load_error(R"({"devices": [ {"provider": "tcp"} ]})", {"devices[0].name", "missing"});
  expect_load_error(R"({"devices": [ {"name": ""} ]})", {"devices[0].name", "empty"});
}

// A key twice in one object: JSON allows it and the last value would win; the
// reader names it instead (every configuration file goes through ConfigNode).
TEST(DeviceDatabase, DuplicateKeyInOneObject) {
  expect_load_error(
      R"({"devices": [ {"name": "a"}, {"name": "b", "port": 1, "provider": "tcp", "port": 2} ]})",
      {"devices[1].port: duplicate key"});
  expect_load_error(R"({"devices": [ {"name": "a", "name": "a"} ]})",
                    {"devices[0].name: duplicate key"});
}

TEST(DeviceDatabase, DuplicateName) {
  expect_load_error(R"({"devices": [ {"name": "a"}, {"name": "a"} ]})",
                    {"devices[1].name", "duplicate", "devices[0]"});
}

TEST(DeviceDatabase, ZeroReceiveDepth) {
  expect_load_error(R"({"devices": [ {"name": "a", "default_receive_buffer_size": 0} ]})",
                    {"devices[0].default_receive_buffer_size"});
}

TEST(DeviceDatabase, WrongShapes) {
  expect_load_error(R"([1, 2])", {"expected an object"});
  expect_load_error(R"({})", {"devices", "missing"});
  expect_load_error(R"({"devices": {}})", {"devices", "expected an array"});
  expect_load_error(R"({"devices": [ 7 ]})", {"devices[0]", "expected an object"});
}

TEST(DeviceDatabase, ParseUsesOriginInMessages) {
  try {
    DeviceDatabase::parse(R"({"devices": [ {"name": "a", "port": true} ]})", "--device-json");
    FAIL() << "parse() did not throw";
  } catch (const Error &e) {
    EXPECT_EQ(std::string(e.what()).rfind("--device-json: devices[0].port: ", 0), 0u) << e.what();
  }
}

TEST(DeviceDatabase, FindByNameThenIp) {
  DeviceDatabase db = DeviceDatabase::parse(kGood, "inline");
  EXPECT_EQ(db.find("lo-shm").provider, "shm");
  EXPECT_EQ(db.find("127.0.0.1").name, "lo-tcp");
  EXPECT_EQ(db.find("127.0.0.2").name, "lo-shm");
}

TEST(DeviceDatabase, FindPrefersNameOverIp) {
  DeviceDatabase db = DeviceDatabase::parse(
      R"({"devices": [ {"name": "x", "ip_address": "10.0.0.1"}, {"name": "10.0.0.1"} ]})", "o");
  EXPECT_EQ(db.find("10.0.0.1").name, "10.0.0.1");
}

TEST(DeviceDatabase, FindUnknownListsKnownNames) {
  DeviceDatabase db = DeviceDatabase::parse(kGood, "inline");
  try {
    db.find("eth7");
    FAIL() << "find() did not throw";
  } catch (const Error &e) {
    EXPECT_EQ(e.kind(), ErrorKind::NotFound);
    std::string msg = e.what();
    for (const char *n : {"eth7", "lo-tcp", "lo-shm", "minimal"})
      EXPECT_NE(msg.find(n), std::string::npos) << n << " not in: " << msg;
  }
}
