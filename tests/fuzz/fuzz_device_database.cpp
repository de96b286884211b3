// Fuzz target: the device database reader (rdmalib::DeviceDatabase::parse, the
// one parser of config/devices.json, which librfaas's device_database uses)
// and the conversion of its entries to rfaas::device and back
// (rfaas/src/devices.cpp).
//
// Bad input must end in rdmalib::Error(Config) (or rfaas::Error for the
// conversion): any other exception escapes and is reported as a crash. What
// parses must survive to_json() and parse again unchanged, and find() must
// find every entry by its name.
#include <string>

#include <rdmalib/device.hpp>
#include <rdmalib/errors.hpp>
#include <rfaas/devices.hpp>
#include <rfaas/errors.hpp>

#include "fuzz_support.hpp"

namespace {

// The reader under test, called in one place.
rdmalib::DeviceDatabase read_devices(const std::string &text) {
  return rdmalib::DeviceDatabase::parse(text, "fuzz.json");
}

bool same(const rdmalib::DeviceConfig &a, const rdmalib::DeviceConfig &b) {
  return a.name == b.name && a.provider == b.provider && a.domain == b.domain &&
         a.interface == b.interface && a.ip_address == b.ip_address && a.port == b.port &&
         a.max_inline_data == b.max_inline_data &&
         a.default_receive_buffer_size == b.default_receive_buffer_size && a.endpoint == b.endpoint;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  rdmalib::DeviceDatabase db;
  try {
    db = read_devices(std::string(reinterpret_cast<const char *>(data), size));
  } catch (const rdmalib::Error &e) {
    FUZZ_CHECK(e.kind() == rdmalib::ErrorKind::Config);
    return 0;
  }
  rdmalib::DeviceDatabase again = read_devices(db.to_json());
  FUZZ_CHECK(again.devices().size() == db.devices().size());
  for (size_t i = 0; i < db.devices().size(); ++i) {
    const rdmalib::DeviceConfig &c = db.devices()[i];
    FUZZ_CHECK(same(c, again.devices()[i]));
    FUZZ_CHECK(&db.find(c.name) == &db.devices()[i]);
    // The name librfaas prints and reads for the preference round-trips.
    FUZZ_CHECK(rfaas::parse_endpoint_preference(rfaas::to_string(c.endpoint)) == c.endpoint);
  }
  return 0;
}
