#include "common/launch_spec.hpp"

#include <set>
#include <sstream>

namespace rfaas::server {

std::vector<uint8_t> bytes_from_hex(const std::string &hex) {
  if (hex.size() % 2 != 0)
    throw SpecError("launch spec: hex field has an odd length");
  std::vector<uint8_t> out(hex.size() / 2);
  if (!from_hex(hex, out.data(), out.size()))
    throw SpecError("launch spec: hex field holds a non-hex character");
  return out;
}

std::string LaunchSpec::serialize() const {
  std::ostringstream o;
  o << "allocation_id " << allocation_id << "\n";
  o << "secret " << to_hex(secret.bytes, sizeof secret.bytes) << "\n";
  o << "cores";
  for (int c : cores)
    o << " " << c;
  o << "\n";
  o << "memory_mib " << memory_mib << "\n";
  std::string dev = rdmalib::DeviceDatabase({device}).to_json();
  o << "device " << to_hex(dev.data(), dev.size()) << "\n";
  o << "manager_host " << manager_host << "\n";
  o << "manager_port " << manager_port << "\n";
  o << "connect_ms " << connect_ms << "\n";
  o << "library_loaded_ms " << library_loaded_ms << "\n";
  o << "seccomp " << (seccomp ? 1 : 0) << "\n";
  o << "owner_uid " << owner_uid << "\n";
  o << "request " << to_hex(request.data(), request.size()) << "\n";
  o << "end\n";
  return o.str();
}

LaunchSpec LaunchSpec::parse(const std::string &text) {
  LaunchSpec s;
  std::istringstream in(text);
  std::string line;
  bool ended = false;
  // Every key exactly once: a spec missing one would start an executor with a
  // default (an unnamed device, no request) and fail later with a worse message.
  static const char *const kKeys[] = {"allocation_id", "secret",     "cores",
                                      "memory_mib",    "device",     "manager_host",
                                      "manager_port",  "connect_ms", "library_loaded_ms",
                                      "seccomp",       "owner_uid",  "request"};
  std::set<std::string> seen;
  auto number = [](const std::string &key, std::istringstream &ls) {
    uint64_t v;
    if (!(ls >> v))
      throw SpecError("launch spec: " + key + ": expected a number");
    return v;
  };
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key;
    ls >> key;
    if (key == "end") {
      ended = true;
      break;
    }
    if (!seen.insert(key).second)
      throw SpecError("launch spec: \"" + key + "\" given twice");
    if (key == "allocation_id") {
      s.allocation_id = number(key, ls);
    } else if (key == "secret") {
      std::string h;
      ls >> h;
      auto b = bytes_from_hex(h);
      if (b.size() != sizeof s.secret.bytes)
        throw SpecError("launch spec: secret: expected 16 bytes");
      std::copy(b.begin(), b.end(), s.secret.bytes);
    } else if (key == "cores") {
      int c;
      while (ls >> c)
        s.cores.push_back(c);
    } else if (key == "memory_mib") {
      s.memory_mib = static_cast<uint32_t>(number(key, ls));
    } else if (key == "device") {
      std::string h;
      ls >> h;
      auto b = bytes_from_hex(h);
      try {
        auto db = rdmalib::DeviceDatabase::parse(std::string(b.begin(), b.end()), "launch spec");
        if (db.devices().size() != 1)
          throw SpecError("launch spec: device: expected exactly one entry");
        s.device = db.devices()[0];
      } catch (const rdmalib::Error &e) {
        throw SpecError(std::string("launch spec: device: ") + e.what());
      }
    } else if (key == "manager_host") {
      ls >> s.manager_host;
    } else if (key == "manager_port") {
      s.manager_port = static_cast<uint16_t>(number(key, ls));
    } else if (key == "connect_ms") {
      s.connect_ms = static_cast<uint32_t>(number(key, ls));
    } else if (key == "library_loaded_ms") {
      s.library_loaded_ms = static_cast<uint32_t>(number(key, ls));
    } else if (key == "seccomp") {
      s.seccomp = number(key, ls) != 0;
    } else if (key == "owner_uid") {
      const uint64_t v = number(key, ls);
      if (v > 0xffffffffu)
        throw SpecError("launch spec: owner_uid: out of range");
      s.owner_uid = static_cast<uint32_t>(v);
    } else if (key == "request") {
      std::string h;
      ls >> h;
      s.request = bytes_from_hex(h);
    } else {
      throw SpecError("launch spec: unknown key \"" + key + "\"");
    }
  }
  if (!ended)
    throw SpecError("launch spec: truncated (no \"end\" line)");
  for (const char *k : kKeys)
    if (!seen.count(k))
      throw SpecError(std::string("launch spec: incomplete (no \"") + k + "\" line)");
  return s;
}

} // namespace rfaas::server
